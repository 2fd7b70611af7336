"""The shape of the topology record a run's manifest holds (topologies.stats.describe writes it): here, in
topologies, so that the package imports nothing of p2pfl; p2pfl.records re-exports them."""
from __future__ import annotations

from typing import TypedDict


class MixingMeasures(TypedDict):
    """stats["mixing"]: SPEC §10's mixing measures of the run's network, one definition per key for every network
    (p2pfl.network.mixing_measures, which defines them): M_t is round t's operator (W_t after a hand-over) over the
    alive peers, K their number, J = 11ᵀ/K, E the mean over the rounds that entered (`rounds`, `rule`). Larger is
    faster mixing for each of spectral_gap, p, p_mean and n_eff."""

    spectral_gap: float  # 1 − |λ2(E[M_t])|: the spectral gap of the expected mixing matrix
    p: float  # 1 − λ_max(E[(M_t − J)ᵀ(M_t − J)]): Koloskova et al. 2020's worst case; p_worst(W) for one fixed W
    p_mean: float  # 1 − E_t[‖M_t − J‖_F² / (K − 1)]: 1 − the mean contraction on random (Gaussian) X
    n_eff: float | None  # Vogels et al. 2022's n_eff(n_eff_gamma) of E[M_t]; None where E[M_t] is not symmetric
    n_eff_gamma: float
    rounds: int  # how many rounds entered (1 for one fixed W)
    # "static W, exact" (nothing drawn, nothing changes), or "mean over N sampled rounds of R", saying where rounds
    # with another alive set (--crash) were left out
    rule: str
    peers: int  # K: the alive peers the measures are over
    estimated: list[str]  # which values are estimates and how (n_eff above DENSE_MAX peers); [] when all are exact


class _TopologyStats(TypedDict):
    """Statistics of the graph and its mixing matrix W (topologies.stats.statistics)."""

    n_nodes: int
    n_edges: int
    diameter: int
    degree_min: int
    degree_mean: float
    degree_max: int
    # These describe the record's W only (the static W; a changing network's mean W of its first rounds, everyone
    # up, p2pfl.run.shown_weights), in closed form; the run's network is measured by `mixing` below.
    lambda2: float  # |λ2(W)|, the second largest eigenvalue modulus
    spectral_gap: float  # 1 - |λ2|
    p: float  # p_worst of W (runs written before stats["mixing"]: a changing network's random-X estimate)
    p_worst: float  # 1 - ‖W − J‖₂² of W (= 1 - max(|λ2|, |λ_K|)² for a symmetric W; Koloskova et al. 2020)
    # "closed form" (older runs of a changing network: "random-X estimate over N rounds (32 columns)", then `p`
    # is that estimate, what stats["mixing"]["p_mean"] now holds exactly)
    p_source: str
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
    """The statistics; `mixing`, the run's network measured over its rounds (MixingMeasures; p2pfl.run writes it,
    absent in older runs and in a record of topologies.describe alone); and for a network that changes round by
    round (p2pfl.network.schedule_measures) one of: the product of one period of a schedule that repeats {rounds,
    lambda2, spectral_gap, n_eff, rate}, or the empirical consensus rate over its first rounds {rate, rounds,
    columns}."""

    mixing: MixingMeasures
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
