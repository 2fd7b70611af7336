"""Omniscient attacks' stage: what a Byzantine neighbour sends to honest receiver i, made from what i gets this round.

The attackers of the papers are omniscient: they see the vectors their target's honest neighbours send in the
current round and tailor their message to that target. The simulator computes these attacks (p2pfl.byzantine.attacks,
capability "omniscient": alie, dissensus) on the receiver's side, inside the checked exchange (p2pfl.gossip.checked:
after delivery, before validation and combine): the attacker sends its own vector (so the bytes on the wire are
those of a real message of the same size), and i's copy of it is replaced by the attack made from i's inbox. Every
input lives with the receiver, so the result does not depend on where the peers sit. Every Byzantine neighbour of i
sends i the same vector.
"""
from __future__ import annotations

from collections.abc import Collection
from typing import Any

import torch

from p2pfl.byzantine.attacks import ATTACKS


class Adversary:
    """The omniscient attackers of a run: `forge` gives a receiver's inbox with its Byzantine senders' messages
    replaced by the attack made for it."""

    def __init__(self, attack: str, byzantine: Collection[int], n_peers: int, scale: float,
                 options: Any = None) -> None:
        made = ATTACKS.get(attack)
        if "omniscient" not in made.capabilities:
            raise ValueError(f"--attack {attack} is sent by the attacker, not made on the receiver's side")
        self.attack, self.byzantine, self.scale = attack, frozenset(byzantine), scale
        self.made = made(self.byzantine, n_peers, scale, **({} if options is None else {"options": options}))

    def forge(self, receiver: int, own: torch.Tensor, received: dict[int, torch.Tensor],
              row: list[tuple[int, float]]) -> dict[int, torch.Tensor]:
        """`received` as honest `receiver` (own vector `own`, row of W `row`) gets it: each Byzantine sender's
        message replaced by the attack (one vector for all of them). A Byzantine receiver's inbox is kept."""
        attackers = [j for j in received if j in self.byzantine]
        if receiver in self.byzantine or not attackers:
            return received
        forged = self.made.message(own, received, row)
        return {j: forged if j in self.byzantine else v for j, v in received.items()}
