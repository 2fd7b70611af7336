"""Mixing matrices W (SPEC §1): W_ij > 0 only for j in N(i) ∪ {i}, every row sums to 1.

A mixing kind maps the sparse 0/1 adjacency (scipy CSR, symmetric) to a sparse W, in O(edges): the same
function serves four peers and a hundred thousand."""
from __future__ import annotations

from collections.abc import Callable

import networkx as nx
import numpy as np
import scipy.sparse as sp

from topologies import sparse
from topologies.base import TopologyError, registrar, spelled

Weights = Callable[[sp.csr_matrix], sp.csr_matrix]

#: mixing kind -> W from the K×K 0/1 adjacency (CSR); the values --mixing accepts (see `register_mixing`)
KINDS: dict[str, Weights] = {}


#: Decorator adding ``fn(adjacency) -> W`` (both CSR) to the mixing kinds under a name.
register_mixing = registrar(KINDS, "mixing")


def adjacency(graph: nx.Graph) -> sp.csr_matrix:
    """The graph's symmetric 0/1 adjacency as float64 CSR (nodes 0..K−1, no self-loops)."""
    k = graph.number_of_nodes()
    if set(graph.nodes) != set(range(k)):
        raise TopologyError(f"mixing needs a graph on nodes 0..{k - 1}")
    if nx.number_of_selfloops(graph):
        raise TopologyError("mixing needs a graph without self-loops")
    return sparse.links_matrix(nx.Graph(graph), k).astype(np.float64)


def _degrees(a: sp.csr_matrix) -> np.ndarray:
    return np.diff(a.indptr).astype(np.float64)


def _on_links(a: sp.csr_matrix, values: np.ndarray) -> sp.csr_matrix:
    """A matrix with a's pattern holding one value per stored entry (row-major)."""
    return sp.csr_matrix((values, a.indices.copy(), a.indptr.copy()), shape=a.shape)


@register_mixing("metropolis")
def metropolis(a: sp.csr_matrix) -> sp.csr_matrix:
    """W_ij = 1/(1+max(deg_i, deg_j)) on edges: symmetric and doubly stochastic (exact average)."""
    deg = _degrees(a)
    rows, cols = sparse.pairs(a)
    return sparse.with_diagonal(_on_links(a, 1.0 / (1.0 + np.maximum(deg[rows], deg[cols]))))


@register_mixing("uniform")
def uniform(a: sp.csr_matrix) -> sp.csr_matrix:
    """W_ij = 1/(deg_i+1) on the closed neighbourhood: row-stochastic only (biased to hubs)."""
    deg = _degrees(a)
    n = a.shape[0]
    rows, cols = sparse.pairs(a)
    everyone = np.arange(n, dtype=np.int64)
    share = 1.0 / (deg + 1.0)
    return sparse.from_pairs(np.concatenate([rows, everyone]), np.concatenate([cols, everyone]), n,
                             np.concatenate([share[rows], share]), np.float64)


@register_mixing("max-degree")
def max_degree(a: sp.csr_matrix) -> sp.csr_matrix:
    """W_ij = 1/(1+max_k deg_k) on edges, W_ii = 1 - deg_i W."""
    top = _degrees(a).max() if a.shape[0] else 0.0
    return sparse.with_diagonal(_on_links(a, np.full(a.nnz, 1.0 / (1.0 + top))))


@register_mixing("server")
def server(a: sp.csr_matrix) -> sp.csr_matrix:
    """The star as a server (--mixing server): the hub averages everyone and sends the average back, W = 11ᵀ/K.

    The weights are those of complete/uniform; p2pfl.network moves them over the star's two hops. (W is dense
    by nature here: K² entries.)"""
    n = a.shape[0]
    return sp.csr_matrix(np.full((n, n), 1.0 / n))


def mixing_weights(graph: nx.Graph, kind: str = "metropolis") -> sp.csr_matrix:
    """The sparse K×K float64 gossip matrix of ``graph`` for a registered mixing kind ("metropolis" by default)."""
    key = spelled(kind)
    if key not in KINDS:
        raise TopologyError(f"unknown mixing {kind!r}; known: {', '.join(KINDS)}")
    return KINDS[key](adjacency(graph))


def mixing_matrix(graph: nx.Graph, kind: str = "metropolis") -> np.ndarray:
    """`mixing_weights` as a dense array (small graphs: drawings, tables, tests)."""
    return mixing_weights(graph, kind).toarray()
