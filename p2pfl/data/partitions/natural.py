"""natural: the data's own groups (a LEAF user, p2pfl.data.datasets.leaf; a value of csv's --natural-column) kept
whole, one or several per peer.

With G groups over K peers: G < K is refused; otherwise the groups are dealt by sizes, largest first, each to the
peer holding the fewest samples so far (ties: the lowest peer), the order among groups of equal size drawn from
the partition's stream (a permutation of the G groups, then a stable sort by size, descending). With G = K every
peer holds one group; with more, the greedy rule keeps the peers' sizes close (the largest exceeds the smallest by
at most the largest group dealt last to it). A peer's indices are ascending. Each peer's groups are recorded in
the manifest (partition.groups).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from p2pfl.data.partitions._base import PARTITIONS, Partition, PartitionError


@PARTITIONS.register("natural")
@dataclass(frozen=True)
class Natural(Partition):
    """Each peer one or more of the data's natural groups (users), whole, sizes balanced."""

    grouped: ClassVar[bool] = True
    paper: ClassVar[str | None] = "Caldas et al. 2018 (LEAF): a user is a client"

    def split_groups(self, groups: np.ndarray, k: int, rng: np.random.Generator) -> list[np.ndarray]:
        n_groups = int(groups.max()) + 1 if groups.size else 0
        present = np.unique(groups)
        if present.size < k:
            raise PartitionError(f"natural partition: {present.size} groups (users) of the data cannot fill {k} "
                                 f"peers (each user whole); use --peers {present.size} or fewer")
        sizes = np.bincount(groups, minlength=n_groups)
        order = rng.permutation(present)
        order = order[np.argsort(-sizes[order], kind="stable")]
        totals = np.zeros(k, dtype=np.int64)
        owner = np.full(n_groups, -1, dtype=np.int64)
        for g in order:
            p = int(np.argmin(totals))  # the first of the smallest
            owner[g] = p
            totals[p] += sizes[g]
        return [np.flatnonzero(owner[groups] == p) for p in range(k)]
