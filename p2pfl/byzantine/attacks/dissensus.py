"""dissensus (He, Karimireddy and Jaggi 2022, the dissensus attack): x_i − ε·Σ_k W_ik (x_k − x_i) / Σ_j W_ij, k over
the honest neighbours that sent to receiver i this round, j over its Byzantine ones, W_i· the row the receiver
combines with, ε = --attack-scale. Under the plain mean it turns i's step into x_i + (1 − ε)·Σ_k W_ik (x_k − x_i):
ε = 1 cancels the honest pull, ε > 1 pushes i away from its honest neighbours. The paper states ε as a per-peer
coefficient without fixing its value; here it is one number for every receiver."""
from __future__ import annotations

from collections.abc import Collection

import torch

from p2pfl.byzantine.attacks import ATTACKS, Omniscient


@ATTACKS.register("dissensus")
class Dissensus(Omniscient):
    """The receiver's honest pull, cancelled (ε = 1) or reversed (ε > 1)."""

    paper = "He, Karimireddy and Jaggi 2022"

    def message(self, own: torch.Tensor, received: dict[int, torch.Tensor], row: list[tuple[int, float]]
                ) -> torch.Tensor:
        return dissensus_message(own, received, row, self.byzantine, self.scale)


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
