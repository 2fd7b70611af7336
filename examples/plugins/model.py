"""A model of one's own, as a plug-in: a depthwise-separable CNN encoder (MobileNet's building block).

    python -m p2pfl.run --plugin examples/plugins/model.py --model sep-cnn --sep-width 16 --sep-norm batch ...

A 3×3 convolution to w channels, then two separable stages (a depthwise 3×3 convolution, one filter per channel,
then a pointwise 1×1 convolution doubling the channels, a normalisation, ReLU and 2×2 max-pooling), then the
global average: features of dimension 4w (w = --sep-width). Without biases its parameters number
9·C·w + 10·w² + 41·w for C input channels (with --sep-norm batch or group, both affine).

Peer-stacked training (--batch-peers, p2pfl.models.stacked) stacks convolutions (grouped ones too), BatchNorm,
pooling and Sequential containers; the encoder says its own forward acts per channel (``peer_stackable``). With
--sep-norm group (GroupNorm: statistics across channels) it cannot be stacked: --batch-peers auto trains peer by
peer and records why in the manifest, --batch-peers on refuses the run.

A model is a class registered with ``@MODELS.register``; its `build(in_channels, image_size)` returns an nn.Module
with an int `feat_dim`; its `Options` arrive as ``self.options``.
"""
from __future__ import annotations

import torch
from torch import nn

from p2pfl.models.encoders import MODELS, Model
from p2pfl.options import opt


class SeparableCNN(nn.Module):
    """Stem, two depthwise-separable stages, global average pool; (B, C, H, W) -> (B, 4·width)."""

    peer_stackable = True  # its forward is its Sequential's: it acts per channel (p2pfl.models.stacked)

    def __init__(self, in_channels: int, width: int, norm: str) -> None:
        super().__init__()

        def normalise(channels: int) -> nn.Module:
            return nn.BatchNorm2d(channels) if norm == "batch" else nn.GroupNorm(1, channels)

        def separable(c_in: int, c_out: int) -> list[nn.Module]:
            return [nn.Conv2d(c_in, c_in, 3, padding=1, groups=c_in, bias=False), nn.Conv2d(c_in, c_out, 1, bias=False),
                    normalise(c_out), nn.ReLU(), nn.MaxPool2d(2)]

        self.body = nn.Sequential(nn.Conv2d(in_channels, width, 3, padding=1, bias=False), normalise(width), nn.ReLU(),
                                  *separable(width, 2 * width), *separable(2 * width, 4 * width),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.feat_dim = 4 * width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


@MODELS.register("sep-cnn")
class SepCNN(Model):
    """A depthwise-separable CNN of width --sep-width."""

    class Options:
        sep_width: int = opt(16, "sep-cnn: channels of the stem (the features have 4x as many)", section="training",
                             bounds=">= 1")
        sep_norm: str = opt("batch", "sep-cnn: normalisation after each convolution (group cannot run peer-stacked)",
                            ("batch", "group"), section="training")

    def build(self, in_channels: int, image_size: int) -> nn.Module:
        return SeparableCNN(in_channels, self.options.sep_width, self.options.sep_norm)
