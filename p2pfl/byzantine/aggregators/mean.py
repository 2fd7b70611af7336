"""mean: Σ_j W_ij x_j, the gossip step (not robust)."""
from __future__ import annotations

from typing import ClassVar

import torch

from p2pfl.byzantine.aggregators import AGGREGATORS, Aggregator
from p2pfl.byzantine.robust import Robust, Scratch


@AGGREGATORS.register("mean")
class Mean(Aggregator):
    """The W-weighted mean, in the row's order (a peer that sent nothing counts as the receiver's own vector)."""

    capabilities: ClassVar[frozenset[str]] = frozenset({"linear"})

    @classmethod
    def aggregate(cls, robust: Robust, peer: int, own: torch.Tensor, received: dict[int, torch.Tensor],
                  row: list[tuple[int, float]], scratch: Scratch | None) -> tuple[torch.Tensor, list[int]]:
        acc = torch.zeros_like(own)
        for j, w in row:
            acc.add_(received[j] if j in received else own, alpha=w)
        return acc, []
