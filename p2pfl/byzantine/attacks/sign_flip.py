"""sign-flip: −scale · x, the attacker's own vector negated (scale: --attack-scale)."""
from __future__ import annotations

import torch

from p2pfl.byzantine.attacks import ATTACKS, Attack


@ATTACKS.register("sign-flip")
class SignFlip(Attack):
    """−s·x."""

    @classmethod
    def send(cls, x: torch.Tensor, *, seed: int, peer: int, round: int, scale: float,
             first: torch.Tensor | None = None) -> torch.Tensor:
        return -scale * x
