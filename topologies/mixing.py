"""Mixing matrices W (SPEC §1): W_ij > 0 only for j in N(i) ∪ {i}, every row sums to 1."""
from __future__ import annotations

import networkx as nx
import numpy as np

from topologies.base import TopologyError, canonical

KINDS = ("metropolis", "uniform", "max-degree")


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


def mixing_matrix(graph: nx.Graph, kind: str = "metropolis") -> np.ndarray:
    """The K×K float64 gossip matrix of ``graph``: "metropolis" (default), "uniform" or "max-degree".

    metropolis: W_ij = 1/(1+max(deg_i, deg_j)) on edges, symmetric and doubly stochastic (exact average);
    uniform: W_ij = 1/(deg_i+1) on the closed neighbourhood, row-stochastic only (biased to hubs);
    max-degree: W_ij = 1/(1+max_k deg_k) on edges, W_ii = 1 - deg_i W.
    """
    key = canonical(kind)
    if key not in KINDS:
        raise TopologyError(f"unknown mixing {kind!r}; known: {', '.join(KINDS)}")
    a = _adjacency(graph)
    deg = a.sum(axis=1)
    if key == "uniform":
        return (a + np.eye(len(deg))) / (deg + 1.0)[:, None]
    if key == "metropolis":
        w = a / (1.0 + np.maximum(deg[:, None], deg[None, :]))
    else:
        w = a / (1.0 + deg.max())
    np.fill_diagonal(w, 1.0 - w.sum(axis=1))
    return w
