"""The shape of the topology record a run's manifest holds (topologies.stats.describe writes it): here, in
topologies, so that the package imports nothing of p2pfl; p2pfl.records re-exports both types."""
from __future__ import annotations

from typing import TypedDict


class _TopologyStats(TypedDict):
    """Statistics of the graph and its mixing matrix W (topologies.stats.statistics)."""

    n_nodes: int
    n_edges: int
    diameter: int
    degree_min: int
    degree_mean: float
    degree_max: int
    lambda2: float  # |λ2(W)|, the second largest eigenvalue modulus
    spectral_gap: float  # 1 - |λ2|
    p: float  # SPEC §10's p: p_worst for a network that does not change, else the random-X estimate over its rounds
    p_worst: float  # 1 - ‖W − J‖₂² of W (= 1 - max(|λ2|, |λ_K|)² for a symmetric W; Koloskova et al. 2020)
    p_source: str  # "closed form", or how `p` was estimated (p2pfl.network.mixing_rate)
    n_eff: float | None  # effective number of neighbours at n_eff_gamma (Vogels et al. 2022); None: W not symmetric
    n_eff_gamma: float
    consensus_share: list[float]  # left Perron vector of W, summing to 1
    max_share: float
    symmetric: bool
    doubly_stochastic: bool
    # which of these are estimates and how, one line each ("n_eff: Hutchinson ...", "diameter: lower bound ...");
    # [] up to topologies.measures.DENSE_MAX peers, where every statistic is exact; absent in older runs
    estimated: list[str]


class TopologyStats(_TopologyStats, total=False):
    """The statistics, and for a network that changes round by round (p2pfl.network.schedule_measures) one of: the
    product of one period of a schedule that repeats {rounds, lambda2, spectral_gap, n_eff, rate}, or the empirical
    consensus rate over its first rounds {rate, rounds, columns}."""

    period_product: dict[str, float | int | None]
    consensus_rate: dict[str, float | int]


class TopologyRecord(TypedDict):
    """manifest["topology"]: sorted edges (i < j), the mixing matrix W sparse, its statistics.

    `weights` holds every nonzero of W as [i, j, W_ij] (i, j ints), row-major: i ascending, then j ascending,
    the diagonal W_ii included where nonzero; entries not listed are 0 and K is stats.n_nodes. Runs written before
    it hold the dense K×K `mixing` (row i a list of K floats) instead. Read either with topologies.stats.mixing_of
    (dense) or sparse_mixing_of (CSR)."""

    edges: list[list[int]]
    weights: list[list[float]]
    stats: TopologyStats
