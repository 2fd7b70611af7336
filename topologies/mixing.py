"""Mixing matrices W (SPEC §1): W_ij > 0 only for j in N(i) ∪ {i}, every row sums to 1."""
from __future__ import annotations

from collections.abc import Callable

import networkx as nx
import numpy as np

from topologies.base import TopologyError, canonical, registrar

Weights = Callable[[np.ndarray], np.ndarray]

#: mixing kind -> W from the K×K 0/1 adjacency matrix; the values --mixing accepts (see `register_mixing`)
KINDS: dict[str, Weights] = {}


#: Decorator adding ``fn(adjacency) -> W`` to the mixing kinds under a name.
register_mixing = registrar(KINDS, "mixing")


def _adjacency(graph: nx.Graph) -> np.ndarray:
    k = graph.number_of_nodes()
    if set(graph.nodes) != set(range(k)):
        raise TopologyError(f"mixing needs a graph on nodes 0..{k - 1}")
    if nx.number_of_selfloops(graph):
        raise TopologyError("mixing needs a graph without self-loops")
    a = np.zeros((k, k))
    for u, v in graph.edges:
        a[u, v] = a[v, u] = 1.0
    return a


def _self_weight(w: np.ndarray) -> np.ndarray:
    """Put the rest of each row's mass on the diagonal: W_ii = 1 - Σ_j W_ij."""
    np.fill_diagonal(w, 1.0 - w.sum(axis=1))
    return w


@register_mixing("metropolis")
def metropolis(a: np.ndarray) -> np.ndarray:
    """W_ij = 1/(1+max(deg_i, deg_j)) on edges: symmetric and doubly stochastic (exact average)."""
    deg = a.sum(axis=1)
    return _self_weight(a / (1.0 + np.maximum(deg[:, None], deg[None, :])))


@register_mixing("uniform")
def uniform(a: np.ndarray) -> np.ndarray:
    """W_ij = 1/(deg_i+1) on the closed neighbourhood: row-stochastic only (biased to hubs)."""
    deg = a.sum(axis=1)
    return (a + np.eye(len(deg))) / (deg + 1.0)[:, None]


@register_mixing("max-degree")
def max_degree(a: np.ndarray) -> np.ndarray:
    """W_ij = 1/(1+max_k deg_k) on edges, W_ii = 1 - deg_i W."""
    return _self_weight(a / (1.0 + a.sum(axis=1).max()))


@register_mixing("server")
def server(a: np.ndarray) -> np.ndarray:
    """The star as a server (--mixing server): the hub averages everyone and sends the average back, W = 11ᵀ/K.

    The weights are those of complete/uniform; p2pfl.network moves them over the star's two hops."""
    return np.full(a.shape, 1.0 / len(a))


def mixing_matrix(graph: nx.Graph, kind: str = "metropolis") -> np.ndarray:
    """The K×K float64 gossip matrix of ``graph`` for a registered mixing kind ("metropolis" by default)."""
    key = canonical(kind)
    if key not in KINDS:
        raise TopologyError(f"unknown mixing {kind!r}; known: {', '.join(KINDS)}")
    return KINDS[key](_adjacency(graph))
