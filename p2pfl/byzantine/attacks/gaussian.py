"""gaussian: x + scale · ε, ε ~ N(0, I) from the attacker's own stream (seed, peer, 'attack/t')."""
from __future__ import annotations

import torch

from p2pfl.byzantine.attacks import ATTACKS, Attack
from p2pfl.seeding import torch_generator


@ATTACKS.register("gaussian")
class Gaussian(Attack):
    """x + s·N(0, I)."""

    @classmethod
    def send(cls, x: torch.Tensor, *, seed: int, peer: int, round: int, scale: float,
             first: torch.Tensor | None = None) -> torch.Tensor:
        gen = torch_generator(seed, peer, f"attack/{round}", x.device)
        return x + scale * torch.randn(x.shape, generator=gen, device=x.device, dtype=x.dtype)
