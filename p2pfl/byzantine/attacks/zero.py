"""zero: the zero vector."""
from __future__ import annotations

import torch

from p2pfl.byzantine.attacks import ATTACKS, Attack


@ATTACKS.register("zero")
class Zero(Attack):
    """0."""

    @classmethod
    def send(cls, x: torch.Tensor, *, seed: int, peer: int, round: int, scale: float,
             first: torch.Tensor | None = None) -> torch.Tensor:
        return torch.zeros_like(x)
