"""inner-dirichlet: peer sizes fixed beforehand, each peer's class mix drawn from Dir_C(alpha), as flwr-datasets'
InnerDirichletPartitioner does (Wang et al. 2020, "Federated Learning with Matched Averaging"): sizes are equal
(±1, `np.array_split`'s) or those of the quantity partition (--inner-sizes quantity: --quantity-exponent or
--quantity-sizes); every peer draws p_i ~ Dir_C(alpha); then, one sample at a time, a peer with room left is chosen
uniformly, a class from its p_i restricted to the classes with samples left (renormalised; the classes' remaining
counts when that leaves nothing), and that class's next shuffled sample is the peer's. Sizes are met exactly and
every sample is used.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from p2pfl.data.partitions._base import PARTITIONS, Partition, PartitionError
from p2pfl.data.partitions._sizes import quantity_sizes
from p2pfl.options import opt


@PARTITIONS.register("inner-dirichlet")
@dataclass(frozen=True)
class InnerDirichlet(Partition):
    """Fixed peer sizes, a Dirichlet class mix per peer."""

    alpha: float = 0.5
    inner_sizes: str = "equal"
    quantity_exponent: float = 1.0
    quantity_sizes: str | None = None

    shown: ClassVar[tuple[str, ...] | None] = ("alpha", "inner_sizes")
    paper: ClassVar[str | None] = "flwr-datasets InnerDirichletPartitioner"

    class Options:
        inner_sizes: str = opt("equal", "inner-dirichlet partition: peer sizes equal, or the quantity partition's "
                                        "(--quantity-exponent, --quantity-sizes); the class mix reads --alpha",
                               ("equal", "quantity"), section="data")

    def sizes(self, n: int, k: int, rng: np.random.Generator) -> np.ndarray:
        """The peers' sizes, summing to N."""
        if self.inner_sizes == "quantity":
            return quantity_sizes(n, k, self.quantity_exponent, self.quantity_sizes, rng)
        return np.array([part.size for part in np.array_split(np.arange(n), k)], dtype=np.int64)

    def split(self, y: np.ndarray, k: int, c: int, rng: np.random.Generator) -> list[np.ndarray]:
        if not self.alpha > 0:
            raise PartitionError(f"inner-dirichlet alpha must be > 0, got {self.alpha}")
        room = self.sizes(y.size, k, rng)
        mix = rng.dirichlet(np.full(c, float(self.alpha)), size=k)
        pools = [rng.permutation(np.flatnonzero(y == cls)) for cls in range(c)]
        left = np.array([pool.size for pool in pools], dtype=np.int64)
        taken = np.zeros(c, dtype=np.int64)
        out = np.empty(y.size, dtype=np.int64)
        owner = np.empty(y.size, dtype=np.int64)
        for step in range(y.size):
            open_peers = np.flatnonzero(room)
            u, v = rng.random(2)
            peer = int(open_peers[int(u * open_peers.size)])
            weights = mix[peer] * (left > 0)
            if not weights.sum() > 0:  # its classes are used up (or underflowed): take what is left
                weights = left.astype(np.float64)
            cum = np.cumsum(weights)
            cls = min(int(np.searchsorted(cum, v * cum[-1], side="right")), c - 1)
            out[step], owner[step] = pools[cls][taken[cls]], peer
            taken[cls] += 1
            left[cls] -= 1
            room[peer] -= 1
        return [out[owner == peer] for peer in range(k)]
