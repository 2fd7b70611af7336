"""Omniscient attacks: what a Byzantine neighbour sends to honest receiver i, made from what i gets this round.

The attackers of the papers are omniscient: they see the vectors their target's honest neighbours send in the
current round and tailor their message to that target. The simulator computes these attacks on the receiver's
side, inside the checked exchange (p2pfl.gossip.checked: after delivery, before validation and combine): the
attacker sends its own vector (so the bytes on the wire are those of a real message of the same size), and i's
copy of it is replaced by the attack made from i's inbox. Every input lives with the receiver, so the result
does not depend on where the peers sit. Every Byzantine neighbour of i sends i the same vector.

- alie (A Little Is Enough, Baruch et al. 2019; decentralised as in He, Karimireddy and Jaggi 2022): μ_i − z·σ_i,
  μ_i and σ_i the coordinate-wise mean and population standard deviation of i's own vector and the vectors its
  honest neighbours sent this round (own included, as the published ClippedGossip code does: i's vector is an
  honest one it combines with, and a receiver whose neighbours are all attackers gets its own vector back).
  z = Φ⁻¹((n − s)/n) with s = ⌊n/2 + 1⌋ − f supporters, n all peers of the network and f the Byzantine ones
  (Baruch's z_max; the ClippedGossip code's variant (n − f − s)/(n − f) is not used). Defined for f ≤ n/2
  (s ≥ 1). --attack-scale is not used.
- dissensus (He, Karimireddy and Jaggi 2022, the dissensus attack): x_i − ε·Σ_k W_ik (x_k − x_i) / Σ_j W_ij, k over
  the honest neighbours that sent to i this round, j over its Byzantine ones, W_i· the row the receiver combines
  with, ε = --attack-scale. Under the plain mean it turns i's step into x_i + (1 − ε)·Σ_k W_ik (x_k − x_i): ε = 1
  cancels the honest pull, ε > 1 pushes i away from its honest neighbours. The paper states ε as a per-peer
  coefficient without fixing its value; here it is one number for every receiver.
"""
from __future__ import annotations

import math
from collections.abc import Collection
from statistics import NormalDist

import torch

OMNISCIENT = ("alie", "dissensus")


def alie_z(n: int, f: int) -> float:
    """Baruch et al.'s z for `f` attackers among `n` peers: Φ⁻¹((n − s)/n), s = ⌊n/2 + 1⌋ − f the honest
    supporters the attackers need. ValueError unless 1 ≤ s < n: f > n/2 needs no supporter (z unbounded), and
    f = 0 among 2 peers gives Φ⁻¹(0)."""
    s = math.floor(n / 2 + 1) - f
    if not 1 <= s < n:
        raise ValueError(f"--attack alie: {f} attackers among {n} peers; ALIE is defined for 1 to {n // 2}")
    return NormalDist().inv_cdf((n - s) / n)


def alie_message(own: torch.Tensor, honest: list[torch.Tensor], z: float) -> torch.Tensor:
    """μ − z·σ over `own` and the `honest` vectors (coordinate-wise, population σ), accumulated in float64 in
    the given order."""
    vectors = [own, *honest]
    mean = torch.zeros_like(own, dtype=torch.float64)
    for v in vectors:
        mean.add_(v)
    mean.div_(len(vectors))
    var, diff = torch.zeros_like(mean), torch.empty_like(mean)
    for v in vectors:
        torch.sub(v, mean, out=diff)
        var.addcmul_(diff, diff)
    return mean.sub_(var.div_(len(vectors)).sqrt_(), alpha=z).to(own.dtype)


def dissensus_message(own: torch.Tensor, received: dict[int, torch.Tensor], row: list[tuple[int, float]],
                      byzantine: Collection[int], eps: float) -> torch.Tensor:
    """x_i − ε·Σ_k W_ik (x_k − x_i) / Σ_j W_ij over the row (in its order): k the honest senders of
    `received`, j the Byzantine ones (own vector back when they weigh nothing)."""
    pull, honest_weight, byzantine_weight = torch.zeros_like(own), 0.0, 0.0
    for j, w in row:
        if j not in received:
            continue
        if j in byzantine:
            byzantine_weight += w
        else:
            pull.add_(received[j], alpha=w)
            honest_weight += w
    if byzantine_weight <= 0:
        return own.clone()
    pull.sub_(own, alpha=honest_weight)
    return pull.mul_(-eps / byzantine_weight).add_(own)


class Adversary:
    """The omniscient attackers of a run: `forge` gives a receiver's inbox with its Byzantine senders' messages
    replaced by the attack made for it."""

    def __init__(self, attack: str, byzantine: Collection[int], n_peers: int, scale: float) -> None:
        if attack not in OMNISCIENT:
            raise ValueError(f"--attack {attack} is sent by the attacker, not made on the receiver's side")
        self.attack, self.byzantine, self.scale = attack, frozenset(byzantine), scale
        self.z = alie_z(n_peers, len(self.byzantine)) if attack == "alie" else 0.0

    def forge(self, receiver: int, own: torch.Tensor, received: dict[int, torch.Tensor],
              row: list[tuple[int, float]]) -> dict[int, torch.Tensor]:
        """`received` as honest `receiver` (own vector `own`, row of W `row`) gets it: each Byzantine sender's
        message replaced by the attack (one vector for all of them). A Byzantine receiver's inbox is kept."""
        attackers = [j for j in received if j in self.byzantine]
        if receiver in self.byzantine or not attackers:
            return received
        if self.attack == "alie":
            honest = [received[j] for j in sorted(received) if j not in self.byzantine]
            forged = alie_message(own, honest, self.z)
        else:
            forged = dissensus_message(own, received, row, self.byzantine, self.scale)
        return {j: forged if j in self.byzantine else v for j, v in received.items()}
