"""Spectral and structural statistics of a topology and its mixing matrix, for the run manifest: the one place
they are computed (drawings and analysis read them from here or from the manifest).

W may be dense or scipy.sparse. Up to topologies.measures.DENSE_MAX peers the statistics are the exact dense
computations; above it W is never densified (ARPACK on W − J, consensus shares 1/K for a doubly stochastic W,
O(nnz) checks) and n_eff is a Hutchinson estimate; a diameter above DIAMETER_EXACT_MAX peers is a double-sweep
lower bound. Each estimate is named, with how it was made, in the stats' `estimated` list."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import networkx as nx
import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph
from scipy.sparse.linalg import LinearOperator, eigs

from topologies import measures
from topologies.measures import N_EFF_GAMMA, Matrix, as_csr, as_dense, is_symmetric, n_eff, p_worst
from topologies.records import TopologyRecord, TopologyStats

TOL = 1e-9
#: Up to this many peers the diameter is exact (a BFS from every peer, O(K·E)); above, a double-sweep lower bound.
DIAMETER_EXACT_MAX = 2000
#: Seeded starts of the double sweeps (two BFS each), and the sources per all-pairs BFS block (memory: block × K).
DIAMETER_STARTS = 4
DIAMETER_SEED = 0
BFS_BLOCK = 256


def consensus_share(w: Matrix) -> np.ndarray:
    """The left Perron vector of W normalised to sum 1: each peer's weight in the gossip limit."""
    if not measures.dense_path(w):
        return _sparse_consensus_share(as_csr(w))
    w = as_dense(w)
    k = w.shape[0]
    system = np.vstack([w.T - np.eye(k), np.ones((1, k))])
    rhs = np.zeros(k + 1)
    rhs[-1] = 1.0
    pi = np.linalg.lstsq(system, rhs, rcond=None)[0]
    return pi / pi.sum()


def _sparse_consensus_share(w: sp.csr_matrix) -> np.ndarray:
    """1/K for a doubly stochastic W; else the Perron eigenvector of the lazy (I + Wᵀ)/2, whose eigenvalue 1 is
    the only one of modulus 1 (so ARPACK's largest-modulus pair is it even for a periodic W)."""
    k = w.shape[0]
    if doubly_stochastic(w):
        return np.full(k, 1.0 / k)
    wt = w.T.tocsr()
    lazy = LinearOperator(w.shape, matvec=lambda x: 0.5 * (x + wt @ x), dtype=np.float64)
    vals, vecs = eigs(lazy, k=1, which="LM", tol=0, v0=np.full(k, 1.0 / k))
    pi = np.real(vecs[:, np.argmin(np.abs(vals - 1.0))])
    return pi / pi.sum()


def second_eigenvalue_modulus(w: Matrix) -> float:
    """|λ2(W)|: the second largest eigenvalue modulus, which sets the gossip contraction rate."""
    if not measures.dense_path(w):
        csr = as_csr(w)
        return measures.deflated_radius(csr, symmetric=is_symmetric(csr))
    moduli = np.sort(np.abs(np.linalg.eigvals(as_dense(w))))[::-1]
    return float(moduli[1]) if moduli.size > 1 else 0.0


def doubly_stochastic(w: Matrix) -> bool:
    """Non-negative (to TOL) with every row and column summing to 1 (to TOL); O(nnz) for a sparse W."""
    if sp.issparse(w):
        nonneg = w.nnz == 0 or float(w.min()) >= -TOL
        rows, cols = np.asarray(w.sum(axis=1)).ravel(), np.asarray(w.sum(axis=0)).ravel()
    else:
        nonneg = bool((w >= -TOL).all())
        rows, cols = w.sum(axis=1), w.sum(axis=0)
    return nonneg and bool(np.allclose(rows, 1.0, atol=TOL) and np.allclose(cols, 1.0, atol=TOL))


#: `p_source` of a p computed from W itself: the shown W's (a changing network's measures over its rounds are in
#: `stats["mixing"]`, p2pfl.network.mixing_measures; runs before them recorded a random-X estimate here).
CLOSED_FORM = "closed form"


def _adjacency(graph: nx.Graph) -> sp.csr_matrix:
    """The graph's symmetric 0/1 adjacency over its nodes in sorted order, in O(E)."""
    index = {node: i for i, node in enumerate(sorted(graph.nodes))}
    pairs = np.array([(index[u], index[v]) for u, v in graph.edges], dtype=np.int64).reshape(-1, 2)
    rows, cols = np.concatenate([pairs[:, 0], pairs[:, 1]]), np.concatenate([pairs[:, 1], pairs[:, 0]])
    k = len(index)
    return sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(k, k))


def _distances(adj: sp.csr_matrix, sources: np.ndarray) -> np.ndarray:
    """Hop counts from each source (rows) to every node; raises as nx.diameter does on a disconnected graph."""
    dist = csgraph.shortest_path(adj, directed=False, unweighted=True, indices=sources)
    if not np.isfinite(dist).all():
        raise nx.NetworkXError("Found infinite path length because the graph is not connected")
    return np.atleast_2d(dist)


def _block_eccentricity(adj: sp.csr_matrix, sources: np.ndarray) -> int:
    """The largest eccentricity among `sources`: BFS from all of them at once, one sparse product per level
    (a column per source; 6× faster than csgraph's one-source searches at 2,000 peers)."""
    k = adj.shape[0]
    seen = np.zeros((k, sources.size), dtype=bool)
    seen[sources, np.arange(sources.size)] = True
    front, level = seen.astype(np.float32), 0
    while True:
        new = (adj @ front > 0) & ~seen
        if not new.any():
            break
        seen |= new
        front, level = new.astype(np.float32), level + 1
    if not seen.all():
        raise nx.NetworkXError("Found infinite path length because the graph is not connected")
    return level


def exact_diameter(adj: sp.csr_matrix) -> int:
    """The largest eccentricity, by BFS from every node in blocks of BFS_BLOCK sources."""
    k, a = adj.shape[0], adj.astype(np.float32)
    return max(_block_eccentricity(a, np.arange(s, min(s + BFS_BLOCK, k))) for s in range(0, k, BFS_BLOCK))


def double_sweep_diameter(adj: sp.csr_matrix, starts: int = DIAMETER_STARTS, seed: int = DIAMETER_SEED) -> int:
    """A lower bound on the diameter: from each seeded start, BFS to its farthest node a, then from a to its
    farthest b and from b; the largest eccentricity seen. Exact on trees (and on vertex-transitive graphs)."""
    k = adj.shape[0]
    best = 0
    for start in np.random.default_rng(seed).choice(k, size=min(starts, k), replace=False):
        node = int(start)
        for _ in range(3):
            dist = _distances(adj, np.array([node]))[0]
            best = max(best, int(dist.max()))
            node = int(np.argmax(dist))
    return best


def diameter(graph: nx.Graph) -> tuple[int, str | None]:
    """The graph's diameter and, when it is only a lower bound, how it was found (else None)."""
    k = graph.number_of_nodes()
    if k <= measures.DENSE_MAX:
        return int(nx.diameter(graph)), None
    adj = _adjacency(graph)
    if k <= DIAMETER_EXACT_MAX:
        return exact_diameter(adj), None
    return double_sweep_diameter(adj), (f"diameter: lower bound, iterated double sweep (3 BFS) from "
                                        f"{DIAMETER_STARTS} seeded starts (seed {DIAMETER_SEED})")


def _structure(graph: nx.Graph) -> tuple[dict[str, Any], list[str]]:
    """Counts, diameter and degrees of the graph (O(E) but for an exact diameter), and the estimates among them."""
    deg = np.array([d for _, d in sorted(graph.degree)], dtype=np.float64)
    diam, how = diameter(graph)
    return dict(n_nodes=graph.number_of_nodes(), n_edges=graph.number_of_edges(), diameter=diam,
                degree_min=int(deg.min()), degree_mean=float(deg.mean()), degree_max=int(deg.max())), \
        [how] if how else []


def _spectral(w: Matrix, gamma: float) -> tuple[dict[str, Any], list[str]]:
    """|λ2|, p, n_eff, consensus shares and stochasticity of W, and the estimates among them."""
    if measures.dense_path(w):
        w = as_dense(w)
        symmetric = bool(np.allclose(w, w.T, atol=TOL))
        lam2, p, neff, estimated = second_eigenvalue_modulus(w), p_worst(w), n_eff(w, gamma), []
    else:
        w = as_csr(w)
        symmetric = is_symmetric(w)
        lam2 = measures.deflated_radius(w, symmetric)
        p = 1.0 - lam2 ** 2 if symmetric else p_worst(w)
        neff, estimated = None, []
        if symmetric:
            neff, error = measures.n_eff_estimate(w, gamma)
            estimated.append(f"n_eff: Hutchinson estimate of trace(Σ), {measures.N_EFF_PROBES} Rademacher probes "
                             f"on 1⊥ (seed {measures.N_EFF_SEED}), CG to {measures.CG_TOL:g}; relative standard "
                             f"error {error:.1e}")
    share = consensus_share(w)
    return dict(lambda2=lam2, spectral_gap=1.0 - lam2, p=p, p_worst=p, p_source=CLOSED_FORM, n_eff=neff,
                n_eff_gamma=float(gamma), consensus_share=[float(s) for s in share], max_share=float(share.max()),
                symmetric=symmetric, doubly_stochastic=doubly_stochastic(w)), estimated


def statistics(graph: nx.Graph, w: Matrix, gamma: float = N_EFF_GAMMA) -> TopologyStats:
    """JSON-ready statistics: spectral gap, |λ2|, p and n_eff(γ) (topologies.measures), diameter, degrees,
    consensus shares, stochasticity, and `estimated`: which of them are estimates, and how ([] up to DENSE_MAX)."""
    structure, rough = _structure(graph)
    spectral, estimated = _spectral(w, gamma)
    return TopologyStats(**structure, **spectral, estimated=rough + estimated)


def weights(w: Matrix) -> list[list[float]]:
    """Every nonzero of W as [i, j, W_ij], row-major (i, then j ascending), the diagonal included."""
    csr = as_csr(w)
    rows = np.repeat(np.arange(csr.shape[0]), np.diff(csr.indptr))
    return [[i, j, v] for i, j, v in zip(rows.tolist(), csr.indices.tolist(), csr.data.tolist())]


def describe(graph: nx.Graph, w: Matrix, gamma: float = N_EFF_GAMMA) -> TopologyRecord:
    """The manifest's topology record: sorted edges (i < j), W's nonzeros (`weights`) and its statistics."""
    if not measures.dense_path(w):
        w = as_csr(w)  # once, not per statistic, when a large W comes dense
    edges = sorted((min(u, v), max(u, v)) for u, v in graph.edges)
    return TopologyRecord(edges=[[int(u), int(v)] for u, v in edges], weights=weights(w),
                          stats=statistics(graph, w, gamma))


def sparse_mixing_of(record: Mapping[str, Any]) -> sp.csr_matrix:
    """W of a manifest topology record as CSR: from its `weights`, or an old run's dense `mixing`."""
    if "weights" not in record:
        return sp.csr_matrix(np.asarray(record["mixing"], dtype=np.float64))
    entries = np.asarray(record["weights"], dtype=np.float64).reshape(-1, 3)
    stats = record.get("stats") or {}
    k = int(stats["n_nodes"]) if "n_nodes" in stats else int(entries[:, :2].max(initial=-1)) + 1
    ij = entries[:, :2].astype(np.int64)
    return sp.csr_matrix((entries[:, 2], (ij[:, 0], ij[:, 1])), shape=(k, k))


def pair_weights(w: Matrix, edges: Any) -> tuple[np.ndarray, np.ndarray]:
    """W_uv and W_vu for each edge (u, v), for a dense or sparse W (never densified)."""
    pairs = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    if not sp.issparse(w):
        w = np.asarray(w, dtype=np.float64)
        return w[pairs[:, 0], pairs[:, 1]], w[pairs[:, 1], pairs[:, 0]]
    csr = sp.csr_matrix(w, dtype=np.float64)
    return (np.asarray(csr[pairs[:, 0], pairs[:, 1]], dtype=np.float64).ravel(),
            np.asarray(csr[pairs[:, 1], pairs[:, 0]], dtype=np.float64).ravel())


def mixing_of(record: Mapping[str, Any]) -> np.ndarray:
    """W of a manifest topology record as a dense K×K array (for small K), from either form."""
    if "weights" not in record:
        return np.asarray(record["mixing"], dtype=np.float64)
    return sparse_mixing_of(record).toarray()
