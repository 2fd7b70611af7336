"""A partition of one's own, as a plug-in: every peer has a majority class.

    python -m p2pfl.run --plugin examples/plugins/partition.py --partition majority --majority-share 0.8 ...

Peer i's majority class is i mod C; a share --majority-share of its N/K samples (rounded down) comes from that class,
the rest from a uniform pool of everything the majorities left. The "dominant class" label skew several papers use
(e.g. "x% of a client's data from one class"). Each class's samples are shuffled and dealt to the peers whose
majority it is, in peer order, as far as the class lasts; what no majority took is shuffled and fills every peer up
to N/K (±1, `np.array_split`'s sizes), so every sample is used.

A partition is a frozen dataclass registered with ``@PARTITIONS.register``: its fields are its parameters (read
from the run's configuration under the same names), its `Options` their flags; `split(y, k, c, rng)` returns one
index array per peer, drawing only from `rng` (the run's ``numpy_rng(seed, SHARED, "partition")``, so every rank
computes the same split). The manifest records its `record()` and `label()`; the heat map draws its class counts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from p2pfl.data.partitions import PARTITIONS, Partition
from p2pfl.options import Check, opt


@PARTITIONS.register("majority")
@dataclass(frozen=True)
class Majority(Partition):
    """A majority class a peer (i mod C), the rest IID."""

    majority_share: float = 0.8

    class Options:
        majority_share: float = opt(0.8, "majority partition: share of a peer's samples from its majority class",
                                    section="data", bounds="[0, 1]")

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        check(cfg.train_subset is None or cfg.train_subset >= 2 * cfg.peers, "train_subset",
              "the majority partition needs at least 2 samples a peer")

    def split(self, y: np.ndarray, k: int, c: int, rng: np.random.Generator) -> list[np.ndarray]:
        sizes = [part.size for part in np.array_split(np.arange(y.size), k)]
        pools = [rng.permutation(np.flatnonzero(y == cls)) for cls in range(c)]
        used = [0] * c
        majority: list[np.ndarray] = []
        for peer in range(k):
            cls = peer % c
            want = int(self.majority_share * sizes[peer])
            majority.append(pools[cls][used[cls]:used[cls] + want])
            used[cls] += majority[-1].size
        rest = rng.permutation(np.concatenate([pool[n:] for pool, n in zip(pools, used)]))
        cuts = np.cumsum([size - m.size for size, m in zip(sizes, majority)])[:-1]
        fill = np.split(rest, cuts)
        return [rng.permutation(np.concatenate([m, f])) for m, f in zip(majority, fill)]
