"""pathological: each peer holds exactly k = --classes-per-peer classes. The C classes are laid out on a circle in a
seeded random order π; peer i takes the k classes at positions i·k, …, i·k + k − 1 (mod C), so a peer's classes
are distinct (k ≤ C), every class is held by ⌊K·k/C⌋ or ⌈K·k/C⌉ peers, all classes are used when K·k ≥ C (else
the classes no peer takes are left out) and consecutive peers share no class while 2k ≤ C. Each class's samples,
shuffled, are split equally (±1, `np.array_split`) among its holders in peer order.

The "exactly k classes per client" split of McMahan et al. 2017 and of flwr-datasets' PathologicalPartitioner
(`num_classes_per_partition`, samples of a class divided equally among the partitions holding it); the class
assignment here differs from that partitioner's modes (which give partition i the classes i, i+1, …, or random
ones): a random class order dealt in blocks of k keeps every class's holders balanced and neighbours apart.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from p2pfl.data.partitions._base import PARTITIONS, Partition, PartitionError
from p2pfl.options import opt


@PARTITIONS.register("pathological")
@dataclass(frozen=True)
class Pathological(Partition):
    """Exactly k classes a peer, each class shared equally by its holders."""

    classes_per_peer: int = 2

    paper: ClassVar[str | None] = "McMahan et al. 2017; flwr-datasets PathologicalPartitioner"

    class Options:
        classes_per_peer: int = opt(2, "pathological partition: the number of classes each peer holds",
                                    section="data", bounds=">= 1")

    @staticmethod
    def holders(k: int, c: int, per_peer: int, order: np.ndarray) -> list[list[int]]:
        """The classes of each peer: positions i·k … i·k + k − 1 (mod C) of the class order."""
        return [[int(order[(i * per_peer + j) % c]) for j in range(per_peer)] for i in range(k)]

    def split(self, y: np.ndarray, k: int, c: int, rng: np.random.Generator) -> list[np.ndarray]:
        per_peer = int(self.classes_per_peer)
        if not 1 <= per_peer <= c:
            raise PartitionError(f"pathological partition: classes_per_peer must lie in [1, {c}] (the classes), "
                                 f"got {per_peer}")
        classes = self.holders(k, c, per_peer, rng.permutation(c))
        owners: list[list[int]] = [[] for _ in range(c)]
        for peer, held in enumerate(classes):
            for cls in held:
                owners[cls].append(peer)
        pieces: list[list[np.ndarray]] = [[] for _ in range(k)]
        for cls in range(c):
            if not owners[cls]:
                continue
            idx = rng.permutation(np.flatnonzero(y == cls))
            if idx.size < len(owners[cls]):
                raise PartitionError(f"pathological partition: class {cls} has {idx.size} samples for "
                                     f"{len(owners[cls])} peers; lower --classes-per-peer or use fewer peers")
            for peer, chunk in zip(owners[cls], np.array_split(idx, len(owners[cls]))):
                pieces[peer].append(chunk)
        return [rng.permutation(np.concatenate(p)) for p in pieces]
