"""Builtin topology generators. Each is one function plus its ``@register`` line."""
from __future__ import annotations

import networkx as nx
import numpy as np

from topologies.base import TopologyError, register
from topologies.streams import SHARED, numpy_rng


def _graph(n: int, edges: list[tuple[int, int]] | np.ndarray) -> nx.Graph:
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from(map(tuple, np.asarray(edges, dtype=np.int64).reshape(-1, 2).tolist()))
    return g


@register("star")
def star(n: int, seed: int = 0) -> nx.Graph:
    """Hub 0 linked to every other peer (the server setting)."""
    return _graph(n, [(0, k) for k in range(1, n)])


@register("cycle", aliases=("ring",))
def cycle(n: int, seed: int = 0) -> nx.Graph:
    """Peer i linked to i±1 mod n (n = 2 gives a single edge); also named ring, recorded as cycle."""
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


#: Pairs drawn per block of rows in `_gnp_edges` (bounds its memory; the draws are the same whatever the block).
GNP_BLOCK = 1 << 22


def _gnp_edges(rng: np.random.Generator, n: int, p: float) -> np.ndarray:
    """The pairs i < j (row-major, the upper triangle's order) whose uniform draw falls below p: one draw per pair,
    taken from `rng` in that order block by block of rows, so memory stays O(GNP_BLOCK + edges) at any n."""
    found = []
    i = 0
    while i < n - 1:
        stop, width = i, 0
        while stop < n - 1 and (width == 0 or width + (n - 1 - stop) <= GNP_BLOCK):
            width += n - 1 - stop
            stop += 1
        lengths = n - 1 - np.arange(i, stop)
        hits = np.flatnonzero(rng.random(width) < p)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        row = np.searchsorted(starts, hits, side="right") - 1
        found.append(np.stack([i + row, i + row + 1 + hits - starts[row]], axis=1))
        i = stop
    return np.concatenate(found) if found else np.zeros((0, 2), dtype=np.int64)


def sample_gnp(rng: np.random.Generator, n: int, p: float, max_tries: int = 100,
               what: str = "random topology") -> nx.Graph:
    """A connected Erdős–Rényi G(n, p) from `rng`: drawn again while disconnected, at most max_tries times."""
    if not 0.0 < float(p) <= 1.0:
        raise TopologyError(f"{what}: p must be in (0, 1], got {p!r}")
    if isinstance(max_tries, bool) or not isinstance(max_tries, int) or max_tries < 1:
        raise TopologyError(f"{what}: max_tries must be an integer >= 1, got {max_tries!r}")
    for _ in range(max_tries):
        g = _graph(n, _gnp_edges(rng, n, float(p)))
        if nx.is_connected(g):
            return g
    raise TopologyError(f"{what}: G(n={n}, p={p}) was disconnected in all {max_tries} draws; raise p or max_tries")


@register("random")
def erdos_renyi(n: int, seed: int = 0, p: float = 0.7, max_tries: int = 100) -> nx.Graph:
    """Erdős–Rényi G(n, p) from the shared "topology" stream, redrawn while disconnected (at most max_tries draws)."""
    return sample_gnp(numpy_rng(seed, SHARED, "topology"), n, p, max_tries, what=f"random topology (seed {seed})")
