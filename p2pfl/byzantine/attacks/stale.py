"""stale: the first vector the attacker ever sent, forever (kept in its peer record, so a resumed run keeps it)."""
from __future__ import annotations

import torch

from p2pfl.byzantine.attacks import ATTACKS, Attack


@ATTACKS.register("stale")
class Stale(Attack):
    """Its first message, again."""

    @classmethod
    def send(cls, x: torch.Tensor, *, seed: int, peer: int, round: int, scale: float,
             first: torch.Tensor | None = None) -> torch.Tensor:
        return first if first is not None else x

    @classmethod
    def remember(cls, memory: dict, sent: torch.Tensor) -> None:
        memory.setdefault("first", sent.clone())
