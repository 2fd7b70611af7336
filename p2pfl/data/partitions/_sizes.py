"""Peer sizes for the partitions that fix them beforehand (quantity, inner-dirichlet): weights from a power law or a
list, rounded to sizes summing to N by the largest-remainder rule."""
from __future__ import annotations

import numpy as np

from p2pfl.data.partitions._base import PartitionError


def parse_sizes(text: str) -> list[float]:
    """'3,1,1' as weights [3.0, 1.0, 1.0]; ValueError unless every weight is a positive finite number."""
    weights = [float(part) for part in str(text).split(",")]
    if not weights or not all(np.isfinite(w) and w > 0 for w in weights):
        raise ValueError(text)
    return weights


def largest_remainder(n: int, weights: np.ndarray) -> np.ndarray:
    """Integer sizes summing to `n`, proportional to `weights` (largest-remainder rounding, ties to lower index)."""
    exact = n * weights / weights.sum()
    sizes = np.floor(exact).astype(np.int64)
    left = n - int(sizes.sum())
    sizes[np.argsort(-(exact - sizes), kind="stable")[:left]] += 1
    return sizes


def quantity_sizes(n: int, k: int, exponent: float, listed: str | None, rng: np.random.Generator) -> np.ndarray:
    """The K peer sizes (summing to N) of the power law, dealt in a seeded order, or of the listed weights."""
    if listed is not None:
        weights = np.asarray(parse_sizes(listed))
        if weights.size != k:
            raise PartitionError(f"quantity partition: --quantity-sizes lists {weights.size} sizes for {k} peers")
        return largest_remainder(n, weights)
    ranked = largest_remainder(n, np.arange(1, k + 1, dtype=np.float64) ** -float(exponent))
    return ranked[rng.permutation(k)]
