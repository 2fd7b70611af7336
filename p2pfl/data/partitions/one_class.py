"""one-class: peer i holds class i mod C only; when K > C the peers sharing a class split its shuffled samples
equally. K < C raises PartitionError (use skew with beta = 0, or pathological, for several classes a peer)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from p2pfl.data.partitions._base import PARTITIONS, Partition, PartitionError


@PARTITIONS.register("one-class", aliases=("oneclass",))
@dataclass(frozen=True)
class OneClass(Partition):
    """One class per peer."""

    def split(self, y: np.ndarray, k: int, c: int, rng: np.random.Generator) -> list[np.ndarray]:
        if k < c:
            raise PartitionError(f"one-class partition needs at least as many peers as classes (K={k}, "
                                 f"classes={c}); use skew with beta=0 to give each peer several whole classes")
        parts: list[np.ndarray] = [np.empty(0, np.int64)] * k
        for cls in range(c):
            owners = list(range(cls, k, c))
            shards = np.array_split(rng.permutation(np.flatnonzero(y == cls)), len(owners))
            for peer, shard in zip(owners, shards):
                parts[peer] = shard
        return parts
