"""Heads put on top of an encoder's features."""
from __future__ import annotations

import torch
from torch import nn


class ProjectionHead(nn.Module):
    """SimCLR projection g: Linear(in, hidden)-BN1d-ReLU-Linear(hidden, out); hidden defaults to in_dim.

    (Dec-SSL's released code uses 512-512-512 on ResNet-18; out_dim 128 is SimCLR's usual choice.)
    """

    peer_stackable = True  # forward acts per channel (p2pfl.models.stacked)

    def __init__(self, in_dim: int, out_dim: int = 128, hidden_dim: int | None = None) -> None:
        super().__init__()
        hidden_dim = int(hidden_dim or in_dim)
        self.in_dim, self.out_dim = int(in_dim), int(out_dim)
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden_dim), nn.BatchNorm1d(hidden_dim), nn.ReLU(inplace=True),
            nn.Linear(hidden_dim, out_dim),
        )

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.net(h)


class MoonHead(nn.Module):
    """MOON projection head: l1 = Linear(F, F), ReLU, l2 = Linear(F, out_dim=256); no BN, no normalisation."""

    peer_stackable = True  # forward acts per channel (p2pfl.models.stacked)

    def __init__(self, in_dim: int, out_dim: int = 256) -> None:
        super().__init__()
        self.in_dim, self.out_dim = int(in_dim), int(out_dim)
        self.l1 = nn.Linear(in_dim, in_dim)
        self.l2 = nn.Linear(in_dim, out_dim)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.relu(self.l1(h)))


class LinearClassifier(nn.Module):
    """A single Linear(in_dim, num_classes) producing logits (linear probe, supervised head)."""

    peer_stackable = True  # forward acts per channel (p2pfl.models.stacked)

    def __init__(self, in_dim: int, num_classes: int) -> None:
        super().__init__()
        self.in_dim, self.num_classes = int(in_dim), int(num_classes)
        self.fc = nn.Linear(in_dim, num_classes)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.fc(h)
