"""median: the coordinate-wise median of the closed neighbourhood (the trimmed mean that keeps the middle one (n
odd) or two (n even) values); it cuts no neighbour."""
from __future__ import annotations

import torch

from p2pfl.byzantine.aggregators import AGGREGATORS, Aggregator
from p2pfl.byzantine.aggregators.trimmed_mean import trimmed_mean
from p2pfl.byzantine.robust import Robust, Scratch


@AGGREGATORS.register("median")
class Median(Aggregator):
    """The coordinate-wise median."""

    @classmethod
    def aggregate(cls, robust: Robust, peer: int, own: torch.Tensor, received: dict[int, torch.Tensor],
                  row: list[tuple[int, float]], scratch: Scratch | None) -> tuple[torch.Tensor, list[int]]:
        return median(own, received, scratch)


def median(own: torch.Tensor, received: dict[int, torch.Tensor], scratch: Scratch | None = None
           ) -> tuple[torch.Tensor, list[int]]:
    """The coordinate-wise median: the trimmed mean that keeps the middle one (odd) or two (even) values."""
    out, _ = trimmed_mean(own, received, (len(received)) // 2, scratch)
    return out, []
