"""skew: Dec-SSL's label skew (beta). Per class, a fraction beta of its (shuffled) samples goes to a uniform pool,
the rest to a class-sorted pool. The uniform pool is shuffled and split equally. The sorted pool is cut into
exclusive contiguous slices: when K ≤ C each peer takes ⌊C/K⌋ whole classes (peer i: classes i·⌊C/K⌋ …
(i+1)·⌊C/K⌋ − 1; the sorted part of the C mod K classes left over is not used); when K > C the sorted pool is cut
into K equal contiguous slices (neighbouring peers share a class). beta = 1 is iid, beta = 0 is fully class-sorted.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from p2pfl.data.partitions._base import PARTITIONS, Partition, PartitionError
from p2pfl.options import opt


@PARTITIONS.register("skew")
@dataclass(frozen=True)
class Skew(Partition):
    """A beta fraction of each class IID, the rest as whole classes per peer (Dec-SSL's label skew)."""

    beta: float = 0.5

    shown: ClassVar[tuple[str, ...] | None] = ("beta",)

    class Options:
        beta: float = opt(0.5, "iid fraction of the skew partition", section="data", bounds="[0, 1]")

    def split(self, y: np.ndarray, k: int, c: int, rng: np.random.Generator) -> list[np.ndarray]:
        beta = self.beta
        if not 0.0 <= beta <= 1.0:
            raise PartitionError(f"skew beta must lie in [0, 1], got {beta}")
        uniform, sorted_by_class = [], []
        for cls in range(c):
            idx_c = rng.permutation(np.flatnonzero(y == cls))
            n_uniform = int(round(beta * idx_c.size))
            uniform.append(idx_c[:n_uniform])
            sorted_by_class.append(idx_c[n_uniform:])
        uniform_parts = np.array_split(rng.permutation(np.concatenate(uniform)), k)
        if k <= c:
            q = c // k
            skew_parts = [np.concatenate(sorted_by_class[i * q:(i + 1) * q]) for i in range(k)]
        else:
            skew_parts = np.array_split(np.concatenate(sorted_by_class), k)
        return [rng.permutation(np.concatenate([u, s])) for u, s in zip(uniform_parts, skew_parts)]
