"""Builtin topology generators. Each is one function plus its ``@register`` line."""
from __future__ import annotations

import networkx as nx
import numpy as np

from p2pfl.seeding import SHARED, numpy_rng
from topologies.base import TopologyError, register


def _graph(n: int, edges: list[tuple[int, int]] | np.ndarray) -> nx.Graph:
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from((int(u), int(v)) for u, v in edges)
    return g


@register("star")
def star(n: int, seed: int = 0) -> nx.Graph:
    """Hub 0 linked to every other peer (the server setting)."""
    return _graph(n, [(0, k) for k in range(1, n)])


@register("cycle")
def cycle(n: int, seed: int = 0) -> nx.Graph:
    """Peer i linked to i±1 mod n (n = 2 gives a single edge)."""
    return _graph(n, [(i, (i + 1) % n) for i in range(n)])


@register("chain")
def chain(n: int, seed: int = 0) -> nx.Graph:
    """The path 0-1-…-(n-1): the tree of largest diameter (RelaySGD's topology in Vogels et al. 2021)."""
    return _graph(n, [(i, i + 1) for i in range(n - 1)])


@register("binary-tree")
def binary_tree(n: int, seed: int = 0) -> nx.Graph:
    """Heap-ordered binary tree: the parent of peer k is (k-1)//2."""
    return _graph(n, [((k - 1) // 2, k) for k in range(1, n)])


@register("complete")
def complete(n: int, seed: int = 0) -> nx.Graph:
    """Every pair linked; with uniform weights gossip is exact FedAvg averaging."""
    return _graph(n, [(i, j) for i in range(n) for j in range(i + 1, n)])


def sample_gnp(rng: np.random.Generator, n: int, p: float, max_tries: int = 100,
               what: str = "random topology") -> nx.Graph:
    """A connected Erdős–Rényi G(n, p) from `rng`: drawn again while disconnected, at most max_tries times."""
    if not 0.0 < float(p) <= 1.0:
        raise TopologyError(f"{what}: p must be in (0, 1], got {p!r}")
    if isinstance(max_tries, bool) or not isinstance(max_tries, int) or max_tries < 1:
        raise TopologyError(f"{what}: max_tries must be an integer >= 1, got {max_tries!r}")
    rows, cols = np.triu_indices(n, k=1)
    for _ in range(max_tries):
        keep = rng.random(rows.size) < p
        g = _graph(n, np.stack([rows[keep], cols[keep]], axis=1))
        if nx.is_connected(g):
            return g
    raise TopologyError(f"{what}: G(n={n}, p={p}) was disconnected in all {max_tries} draws; raise p or max_tries")


@register("random")
def erdos_renyi(n: int, seed: int = 0, p: float = 0.7, max_tries: int = 100) -> nx.Graph:
    """Erdős–Rényi G(n, p) from the shared "topology" stream, redrawn while disconnected (at most max_tries draws)."""
    return sample_gnp(numpy_rng(seed, SHARED, "topology"), n, p, max_tries, what=f"random topology (seed {seed})")
