"""quantity: quantity skew with IID labels. Peer sizes are proportional to weights: a power law w_r = (r + 1)^(−γ)
over ranks r = 0…K−1 (γ = --quantity-exponent; 0: equal), dealt to the peers in a seeded random order, or the
--quantity-sizes list (weights in peer order: a list of counts summing to N gives exactly those counts). Weights
become sizes summing to N by the largest-remainder rule: each peer ⌊N·w/Σw⌋, the samples left over one each to
the largest fractional parts (ties to the lower peer). A random permutation of the indices is then cut at the
sizes' cumulative sums. Every sample is used.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from p2pfl.data.partitions._base import PARTITIONS, Partition
from p2pfl.data.partitions._sizes import parse_sizes, quantity_sizes
from p2pfl.options import Check, opt


@PARTITIONS.register("quantity")
@dataclass(frozen=True)
class Quantity(Partition):
    """IID labels, sizes from a power law or a list."""

    quantity_exponent: float = 1.0
    quantity_sizes: str | None = None

    class Options:
        quantity_exponent: float = opt(1.0, "quantity partition: peer sizes follow rank^-EXPONENT (0: equal)",
                                       section="data", bounds=">= 0")
        quantity_sizes: str | None = opt(None, "quantity partition: relative sizes, one per peer in peer order "
                                               "(W1,W2,...; counts summing to N are exact), instead of the power "
                                               "law", section="data")

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        listed = cfg.quantity_sizes
        try:
            weights = parse_sizes(listed) if listed is not None else None
        except ValueError:
            weights = None
            check(False, "quantity_sizes", f"expected positive numbers separated by commas, got {listed!r}")
        peers = getattr(cfg, "peers", None)
        check(weights is None or not isinstance(peers, int) or len(weights) == peers, "quantity_sizes",
              f"lists {0 if weights is None else len(weights)} sizes for --peers {peers}")

    def record(self) -> dict[str, Any]:
        return {"quantity_exponent": self.quantity_exponent} if self.quantity_sizes is None else \
            {"quantity_sizes": self.quantity_sizes}

    def label(self) -> str:
        return f"{self.name}({', '.join(f'{k}={v}' for k, v in self.record().items())})"

    def split(self, y: np.ndarray, k: int, c: int, rng: np.random.Generator) -> list[np.ndarray]:
        sizes = quantity_sizes(y.size, k, self.quantity_exponent, self.quantity_sizes, rng)
        return list(np.split(rng.permutation(y.size), np.cumsum(sizes)[:-1]))
