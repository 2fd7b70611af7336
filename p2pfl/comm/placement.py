"""Which rank hosts which peer.

The rule: peers are cut into `size` contiguous blocks in peer order, the first `K mod size` blocks one peer
longer. Rank r hosts peers [start(r), start(r+1)) with start(r) = r*(K//size) + min(r, K mod size). Contiguous
blocks keep neighbours on a cycle or a binary tree mostly on the same rank, so most traffic stays in memory.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class Placement:
    """The peer → rank map of a job with `n_peers` peers on `n_ranks` ranks."""

    n_peers: int
    n_ranks: int

    def __post_init__(self) -> None:
        if self.n_peers < self.n_ranks:
            raise ValueError(f"{self.n_peers} peers cannot fill {self.n_ranks} ranks")

    def start(self, rank: int) -> int:
        base, extra = divmod(self.n_peers, self.n_ranks)
        return rank * base + min(rank, extra)

    def peers_of(self, rank: int) -> list[int]:
        """Peers hosted by `rank`, ascending."""
        return list(range(self.start(rank), self.start(rank + 1)))

    def rank_of(self, peer: int) -> int:
        base, extra = divmod(self.n_peers, self.n_ranks)
        cut = extra * (base + 1)
        return peer // (base + 1) if peer < cut else extra + (peer - cut) // base

    @cached_property
    def ranks(self) -> np.ndarray:
        """rank_of of every peer, as one array (vectorised lookups)."""
        out = np.empty(self.n_peers, dtype=np.int64)
        for r in range(self.n_ranks):
            out[self.start(r):self.start(r + 1)] = r
        return out
