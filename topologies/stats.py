"""Spectral and structural statistics of a topology and its mixing matrix, for the run manifest: the one place
they are computed (drawings and analysis read them from here or from the manifest)."""
from __future__ import annotations

import networkx as nx
import numpy as np

from p2pfl.records import TopologyRecord, TopologyStats
from topologies.measures import N_EFF_GAMMA, n_eff, p_worst

TOL = 1e-9


def consensus_share(w: np.ndarray) -> np.ndarray:
    """The left Perron vector of W normalised to sum 1: each peer's weight in the gossip limit."""
    k = w.shape[0]
    system = np.vstack([w.T - np.eye(k), np.ones((1, k))])
    rhs = np.zeros(k + 1)
    rhs[-1] = 1.0
    pi = np.linalg.lstsq(system, rhs, rcond=None)[0]
    return pi / pi.sum()


def second_eigenvalue_modulus(w: np.ndarray) -> float:
    """|λ2(W)|: the second largest eigenvalue modulus, which sets the gossip contraction rate."""
    moduli = np.sort(np.abs(np.linalg.eigvals(w)))[::-1]
    return float(moduli[1]) if moduli.size > 1 else 0.0


#: `p_source` of a p computed from W itself (a changing network's run records its estimate instead).
CLOSED_FORM = "closed form"


def statistics(graph: nx.Graph, w: np.ndarray, gamma: float = N_EFF_GAMMA) -> TopologyStats:
    """JSON-ready statistics: spectral gap, |λ2|, p and n_eff(γ) (topologies.measures), diameter, degrees,
    consensus shares, stochasticity."""
    w = np.asarray(w, dtype=np.float64)
    deg = np.array([d for _, d in sorted(graph.degree)], dtype=np.float64)
    lam2 = second_eigenvalue_modulus(w)
    share = consensus_share(w)
    nonneg = bool((w >= -TOL).all())
    return TopologyStats(
        n_nodes=graph.number_of_nodes(),
        n_edges=graph.number_of_edges(),
        diameter=int(nx.diameter(graph)),
        degree_min=int(deg.min()),
        degree_mean=float(deg.mean()),
        degree_max=int(deg.max()),
        lambda2=lam2,
        spectral_gap=1.0 - lam2,
        p=p_worst(w),
        p_worst=p_worst(w),
        p_source=CLOSED_FORM,
        n_eff=n_eff(w, gamma),
        n_eff_gamma=float(gamma),
        consensus_share=[float(s) for s in share],
        max_share=float(share.max()),
        symmetric=bool(np.allclose(w, w.T, atol=TOL)),
        doubly_stochastic=nonneg
        and bool(np.allclose(w.sum(axis=1), 1.0, atol=TOL) and np.allclose(w.sum(axis=0), 1.0, atol=TOL)),
    )


def describe(graph: nx.Graph, w: np.ndarray, gamma: float = N_EFF_GAMMA) -> TopologyRecord:
    """The manifest's topology record: sorted edges (i < j), the mixing matrix and its statistics."""
    edges = sorted((min(u, v), max(u, v)) for u, v in graph.edges)
    return TopologyRecord(edges=[[int(u), int(v)] for u, v in edges], mixing=np.asarray(w, dtype=np.float64).tolist(),
                          stats=statistics(graph, w, gamma))
