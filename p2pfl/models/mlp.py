"""``--model mlp``: a multilayer perceptron, the encoder of tabular data (feature vectors, p2pfl.capabilities.FEATURES).

Its input is flattened: feature vectors N×F (built for in_channels F, image_size 1) or images N×C×H×W (C·H·W
inputs). Each width of ``--hidden`` adds Linear then ReLU; feat_dim is the last width (the input size without
hidden layers). Initialisation: PyTorch's default for each Linear, drawn from the run's init stream. It runs
peer-stacked (--batch-peers: Linear, ReLU and Flatten act per peer), by default on a CPU too (measured faster).
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from p2pfl.capabilities import FEATURES
from p2pfl.options import Check, opt

from .base import Encoder, ModelConfigError, check_geometry
from .encoders import MODELS, Model


def widths(text: str) -> tuple[int, ...]:
    """The hidden widths of ``--hidden`` ("64,64"; "" for none); ModelConfigError unless positive integers."""
    parts = [p.strip() for p in text.split(",")] if text.strip() else []
    if not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise ModelConfigError(f"--hidden: comma-separated widths >= 1 (e.g. 64,64; empty for none), got {text!r}")
    return tuple(int(p) for p in parts)


class MLP(Encoder):
    """Flatten, then Linear-ReLU per hidden width."""

    peer_stackable = True  # forward acts per channel (p2pfl.models.stacked)

    def __init__(self, in_channels: int, image_size: int = 1, hidden: tuple[int, ...] = (64, 64)) -> None:
        super().__init__()
        check_geometry("mlp", in_channels, image_size)
        self.in_channels, self.image_size = int(in_channels), int(image_size)
        width = self.in_channels * self.image_size * self.image_size
        layers: list[nn.Module] = [nn.Flatten()]
        for out in hidden:
            layers += [nn.Linear(width, out), nn.ReLU()]
            width = out
        self.net = nn.Sequential(*layers)
        self.feat_dim = int(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@MODELS.register("mlp")
class MLPModel(Model):
    """A multilayer perceptron (--hidden widths): the model of feature vectors (a tabular --dataset)."""

    #: Peer-stacked on a CPU: 2.6x (fedavg, breast-cancer CSV, 16 and 64 peers, 2-core machine, 2026-12-03).
    capabilities = frozenset({FEATURES, "cpu-stacked-faster"})

    class Options:
        hidden: str = opt("64,64", "mlp: widths of its hidden layers, comma-separated (empty: none)",
                          section="training")

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        try:
            widths(cfg.hidden)
        except ModelConfigError as e:
            check(False, "hidden", str(e).removeprefix("--hidden: "))

    def build(self, in_channels: int, image_size: int) -> nn.Module:
        return MLP(in_channels, image_size, widths(self.options.hidden))
