"""iid: a random permutation of the indices cut into K parts of equal size (±1)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from p2pfl.data.partitions._base import PARTITIONS, Partition


@PARTITIONS.register("iid")
@dataclass(frozen=True)
class IID(Partition):
    """Every peer a uniform random share of the data."""

    def split(self, y: np.ndarray, k: int, c: int, rng: np.random.Generator) -> list[np.ndarray]:
        return list(np.array_split(rng.permutation(y.size), k))
