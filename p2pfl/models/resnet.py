"""ResNets with a CIFAR stem (3x3 conv, stride 1, no max-pool), torchvision-compatible parameter names.

``resnet18`` is the Dec-SSL / MOON CIFAR ResNet-18 (BasicBlock [2,2,2,2], widths 64..512, feat 512).
``resnet-small`` is a narrow variant for fast CPU runs (widths 16/32/64, one block per stage, feat 64).
Names match torchvision (conv1, bn1, layerK.i.{conv1,bn1,conv2,bn2,downsample.0,downsample.1}) so a
torchvision ``resnet18`` with the CIFAR stem and without ``fc`` loads into ``resnet18`` with strict=True.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .base import Encoder, ModelConfigError, check_geometry
from .encoders import MODELS, Model


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with an identity or 1x1 conv-BN shortcut (torchvision's BasicBlock)."""

    peer_stackable = True  # forward acts per channel (p2pfl.models.stacked)

    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_planes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class CifarResNet(Encoder):
    """BasicBlock ResNet with a CIFAR stem; feature = global average pool of the last stage (widths[-1]).

    Initialisation (MOON's resnetcifar / torchvision): conv weights kaiming_normal(fan_out, relu), BatchNorm
    weight 1, bias 0, running stats reset; zero_init_residual off.
    """

    peer_stackable = True  # forward acts per channel (p2pfl.models.stacked)

    def __init__(
        self,
        in_channels: int = 3,
        image_size: int = 32,
        widths: Sequence[int] = (64, 128, 256, 512),
        blocks: Sequence[int] = (2, 2, 2, 2),
        name: str = "resnet",
    ) -> None:
        super().__init__()
        check_geometry(name, in_channels, image_size, min_size=4)
        widths, blocks = [int(w) for w in widths], [int(b) for b in blocks]
        if len(widths) != len(blocks) or not widths or min(widths) < 1 or min(blocks) < 1:
            raise ModelConfigError(
                f"encoder {name!r}: widths and blocks must be equally long lists of positive ints, "
                f"got {widths}, {blocks}"
            )
        self.in_channels, self.image_size = int(in_channels), int(image_size)
        self.conv1 = nn.Conv2d(in_channels, widths[0], 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        in_planes = widths[0]
        for i, (w, n) in enumerate(zip(widths, blocks)):
            stride = 1 if i == 0 else 2
            layers = []
            for j in range(n):
                layers.append(BasicBlock(in_planes, w, stride if j == 0 else 1))
                in_planes = w
            self.add_module(f"layer{i + 1}", nn.Sequential(*layers))
        self.num_stages = len(widths)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.feat_dim = widths[-1]
        self.p2pfl_init_()

    def p2pfl_init_(self) -> None:
        """Re-initialise with the torchvision/MOON scheme (kaiming_normal fan_out convs, BN 1/0)."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
                m.reset_running_stats()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        for i in range(self.num_stages):
            x = getattr(self, f"layer{i + 1}")(x)
        return torch.flatten(self.avgpool(x), 1)


def resnet18(in_channels: int = 3, image_size: int = 32) -> CifarResNet:
    """CIFAR ResNet-18: BasicBlock [2,2,2,2], widths 64/128/256/512, feat_dim 512 (~11.17M parameters)."""
    return CifarResNet(in_channels, image_size, (64, 128, 256, 512), (2, 2, 2, 2), name="resnet18")


def resnet_small(
    in_channels: int = 3,
    image_size: int = 32,
    widths: Sequence[int] = (16, 32, 64),
    blocks: Sequence[int] = (1, 1, 1),
) -> CifarResNet:
    """A narrow CIFAR ResNet for fast CPU runs: widths 16/32/64, one BasicBlock per stage, feat_dim 64."""
    return CifarResNet(in_channels, image_size, widths, blocks, name="resnet-small")


@MODELS.register("resnet18")
class ResNet18Model(Model):
    """The Dec-SSL / MOON CIFAR ResNet-18 (feat_dim 512)."""

    build = staticmethod(resnet18)


@MODELS.register("resnet-small")
class ResNetSmallModel(Model):
    """A narrow CIFAR ResNet for fast CPU runs (feat_dim 64)."""

    build = staticmethod(resnet_small)
