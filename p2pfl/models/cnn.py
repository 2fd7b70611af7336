"""MOON's small CNN (``SimpleCNN_header``): the CIFAR-10 encoder of the MOON paper (SPEC §5)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .base import Encoder, MaxPool2x2, check_geometry
from .encoders import MODELS, Model


class SimpleCNN(Encoder):
    """conv5x5(6)-ReLU-pool2-conv5x5(16)-ReLU-pool2-FC120-ReLU-FC84-ReLU; feat_dim 84.

    The first FC layer's input adapts to the geometry: 16x5x5 = 400 for 32x32 inputs (MOON's CIFAR-10
    network), 16x4x4 = 256 for 28x28. Layer names follow MOON (conv1, pool, conv2, fc1, fc2). No BatchNorm.
    Initialisation: each layer's PyTorch default (as in MOON).
    """

    peer_stackable = True  # forward acts per channel (p2pfl.models.stacked)

    def __init__(self, in_channels: int = 3, image_size: int = 32, hidden: tuple[int, int] = (120, 84)) -> None:
        super().__init__()
        check_geometry("simple-cnn", in_channels, image_size, min_size=16)
        self.in_channels, self.image_size = int(in_channels), int(image_size)
        self.conv1 = nn.Conv2d(in_channels, 6, 5)
        self.pool = MaxPool2x2()
        self.conv2 = nn.Conv2d(6, 16, 5)
        side = ((image_size - 4) // 2 - 4) // 2
        self.flat_dim = 16 * side * side
        self.fc1 = nn.Linear(self.flat_dim, hidden[0])
        self.fc2 = nn.Linear(hidden[0], hidden[1])
        self.feat_dim = int(hidden[1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # MOON's pool(relu(conv)) as relu(pool(conv)): the same values and gradients bit for bit (ReLU is
        # monotone, and where a window's maximum is not positive ReLU's backward zeroes the gradient either way),
        # with the ReLU and its backward on a quarter of the elements (tests/test_models.py)
        x = F.relu(self.pool(self.conv1(x)))
        x = F.relu(self.pool(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        return F.relu(self.fc2(x))


@MODELS.register("simple-cnn")
class SimpleCNNModel(Model):
    """MOON's small CNN (feat_dim 84): the default, and the fastest peer-stacked on a CPU."""

    capabilities = frozenset({"cpu-stacked-faster"})  # benchmarks/bench_batched_peers.py: 2.3x at 20 and 100 peers
    build = staticmethod(SimpleCNN)
