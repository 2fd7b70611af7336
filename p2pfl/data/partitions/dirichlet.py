"""dirichlet: MOON's label-Dirichlet (alpha). Per class k, p ~ Dir_K(alpha); peers holding more than N/K samples
already get p_j = 0; renormalise; cut the shuffled class indices at cumsum(p). The whole partition is redrawn until
every peer holds at least ``min_size`` samples (at most ``max_tries`` draws, then PartitionError). If a class's
masked p sums to zero (tiny alpha), that class's Dirichlet draw is repeated. Each peer's indices are shuffled. With
a size band (the Dec-SSL code's acceptance rule) a draw is kept only when every peer holds between (1 − band)·N/K
and (1 + band)·N/K samples.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from p2pfl.data.partitions._base import PARTITIONS, Partition, PartitionError
from p2pfl.options import opt


@PARTITIONS.register("dirichlet")
@dataclass(frozen=True)
class Dirichlet(Partition):
    """Label-Dirichlet over peers, class by class (Li et al. 2021, MOON)."""

    alpha: float = 0.5
    min_size: int = 10
    size_band: float | None = None
    max_tries: int = 1000

    shown: ClassVar[tuple[str, ...] | None] = ("alpha",)
    paper: ClassVar[str | None] = "Li, He, Song 2021 (MOON), partition by Dir(alpha) per class"

    class Options:
        alpha: float = opt(0.1, "Dirichlet concentration", section="data", bounds="> 0")
        size_band: float | None = opt(None, "Dirichlet: redraw until every shard holds between (1 - BAND) N/K and "
                                            "(1 + BAND) N/K samples (the Dec-SSL code's rule: 0.5); default: MOON's "
                                            "min_size rule", section="data", bounds="(0, 1)")
        min_size: int = opt(10, "smallest shard a Dirichlet partition may give a peer", section="data",
                            bounds=">= 0")

    def split(self, y: np.ndarray, k: int, c: int, rng: np.random.Generator) -> list[np.ndarray]:
        n, alpha, min_size, band = y.size, self.alpha, self.min_size, self.size_band
        if not alpha > 0:
            raise PartitionError(f"dirichlet alpha must be > 0, got {alpha}")
        if band is not None:
            if not 0 < band < 1:
                raise PartitionError(f"dirichlet size band must lie in (0, 1), got {band}")
            low, high = (1 - band) * n / k, (1 + band) * n / k
            min_size = max(min_size, math.ceil(low))
        if n < k * min_size:
            raise PartitionError(f"dirichlet partition: {n} samples cannot give each of {k} peers "
                                 f"min_size={min_size}")
        by_class = [np.flatnonzero(y == cls) for cls in range(c)]
        cap = n / k
        smallest = 0
        for _ in range(self.max_tries):
            batches: list[list[np.ndarray]] = [[] for _ in range(k)]
            sizes = np.zeros(k, dtype=np.int64)
            for idx_c in by_class:
                idx_c = rng.permutation(idx_c)
                open_peers = sizes <= cap  # peers holding more than N/K get nothing more
                for _redraw in range(100):
                    p = rng.dirichlet(np.full(k, float(alpha))) * open_peers
                    if p.sum() > 0:
                        break
                else:  # Dirichlet draws kept underflowing on the open peers: share the class evenly among them
                    p = open_peers.astype(np.float64)
                p = p / p.sum()
                cuts = (np.cumsum(p) * idx_c.size).astype(np.int64)[:-1]
                for j, chunk in enumerate(np.split(idx_c, cuts)):
                    if chunk.size:
                        batches[j].append(chunk)
                        sizes[j] += chunk.size
            smallest = max(smallest, int(sizes.min()))
            if sizes.min() >= min_size and (band is None or sizes.max() <= high):
                return [rng.permutation(np.concatenate(b)) if b else np.empty(0, np.int64) for b in batches]
        if band is not None:
            raise PartitionError(f"dirichlet partition: no draw in {self.max_tries} kept all {k} peers within "
                                 f"{low:.0f}..{high:.0f} samples (size band {band}, alpha={alpha}, N={n}); "
                                 f"raise alpha or the band, or use fewer peers")
        raise PartitionError(f"dirichlet partition: no draw in {self.max_tries} gave all {k} peers at least "
                             f"min_size={min_size} samples (alpha={alpha}, N={n}, best smallest={smallest}); "
                             f"raise alpha, lower min_size or use fewer peers")
