"""shard: McMahan et al.'s pathological non-IID split (2017, "Communication-Efficient Learning of Deep Networks from
Decentralized Data", §3: MNIST sorted by label, cut into 200 shards of 300, 2 shards per client). The indices sorted
by label (stably: within a class in index order) are cut into S = K·s contiguous shards of equal size (±1:
`np.array_split`, so every sample is used); a seeded permutation of the S shards gives peer i the shards at
positions i·s … i·s + s − 1. A peer holds at most s classes when every shard lies within one class (shard size
dividing each class's count), one more per shard that straddles a class boundary otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from p2pfl.data.partitions._base import PARTITIONS, Partition, PartitionError
from p2pfl.options import opt


@PARTITIONS.register("shard")
@dataclass(frozen=True)
class Shard(Partition):
    """s random shards of the label-sorted data per peer."""

    shards_per_peer: int = 2

    paper: ClassVar[str | None] = "McMahan et al. 2017 (FedAvg): 2 shards per client"

    class Options:
        shards_per_peer: int = opt(2, "shard partition: shards of the label-sorted data each peer gets",
                                   section="data", bounds=">= 1")

    def split(self, y: np.ndarray, k: int, c: int, rng: np.random.Generator) -> list[np.ndarray]:
        s = int(self.shards_per_peer)
        if s < 1:
            raise PartitionError(f"shard partition: shards_per_peer must be >= 1, got {s}")
        if k * s > y.size:
            raise PartitionError(f"shard partition: {y.size} samples cannot make {k}x{s} = {k * s} shards; "
                                 f"lower --shards-per-peer or use fewer peers")
        shards = np.array_split(np.argsort(y, kind="stable"), k * s)
        order = rng.permutation(k * s)
        return [rng.permutation(np.concatenate([shards[j] for j in order[i * s:(i + 1) * s]])) for i in range(k)]
