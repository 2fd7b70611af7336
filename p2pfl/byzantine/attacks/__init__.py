"""What a Byzantine peer sends instead of its vector: one `Attack` a file, registered in `ATTACKS` and chosen by
--attack. Most are made on the attacker's side, one vector for all its neighbours (`Attack.send`, run by
p2pfl.gossip.codec.Attacking): sign-flip, gaussian, zero, stale. The omniscient ones (capability "omniscient":
alie, dissensus) are tailored to each receiver from what it gets this round, made on the receiver's side
(`Omniscient.message`, run by p2pfl.byzantine.omniscient.Adversary). The run makes one attack object with its
own `Options` as it holds them, read as `self.options` (p2pfl.byzantine.robust.Robust.attacker)."""
from __future__ import annotations

from collections.abc import Collection
from typing import Any, ClassVar

import torch

from p2pfl.registry import Component, Registry, options_of

#: The attacks, by their --attack name.
ATTACKS: Registry[Any] = Registry("attack", option="attack", package="p2pfl.byzantine.attacks")


class Attack(Component):
    """An attack made on the attacker's side."""

    def __init__(self, options: Any = None) -> None:
        self.options = options  # its Options as the run holds them (their defaults outside a run); None without

    def send(self, x: torch.Tensor, *, seed: int, peer: int, round: int, scale: float,
             first: torch.Tensor | None = None) -> torch.Tensor:
        """The vector attacker `peer` sends in `round` instead of its own `x` (scale: --attack-scale; `first`: what
        `remember` kept of its first message, None before)."""
        raise NotImplementedError

    @classmethod
    def remember(cls, memory: dict, sent: torch.Tensor) -> None:
        """Keep in the attacker's `memory` (its peer record, checkpointed) what later rounds need of `sent`."""


class Omniscient(Attack):
    """An attack made for each honest receiver from its own vector, its inbox and its row of W; every Byzantine
    neighbour of a receiver sends it the same vector. The attacker itself sends its own vector (so the bytes on the
    wire are those of a real message)."""

    capabilities: ClassVar[frozenset[str]] = frozenset({"omniscient"})

    def __init__(self, byzantine: Collection[int], n_peers: int, scale: float, options: Any = None) -> None:
        super().__init__(options)
        self.byzantine, self.n_peers, self.scale = frozenset(byzantine), n_peers, scale

    @classmethod
    def send(cls, x: torch.Tensor, *, seed: int, peer: int, round: int, scale: float,
             first: torch.Tensor | None = None) -> torch.Tensor:
        raise ValueError(f"--attack {cls.name} is made on the receiver's side (p2pfl.byzantine.omniscient)")

    def message(self, own: torch.Tensor, received: dict[int, torch.Tensor], row: list[tuple[int, float]]
                ) -> torch.Tensor:
        """What the Byzantine senders of `received` send the honest receiver of `own` (row: its row of W)."""
        raise NotImplementedError


def attack_vector(kind: str, x: torch.Tensor, *, seed: int, peer: int, round: int, scale: float,
                  first: torch.Tensor | None = None, options: Any = None) -> torch.Tensor:
    """The vector attacker `peer` sends in `round` instead of its own `x` under --attack `kind` (its `options`:
    their defaults when None)."""
    cls = ATTACKS.get(kind)
    if "omniscient" in cls.capabilities:  # made on the receiver's side: its `send` says so
        return cls.send(x, seed=seed, peer=peer, round=round, scale=scale, first=first)
    made = cls(options if options is not None else options_of(cls, None))
    return made.send(x, seed=seed, peer=peer, round=round, scale=scale, first=first)
