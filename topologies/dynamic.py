"""Topologies that change every round: the graph of round t is a pure function of (n, seed, t).

A dynamic topology gives each round's links as a directed graph (an edge j -> i: peer i hears from peer j; an
undirected topology lists both directions) and its support, the undirected union of every link it can use,
which is what the exchange's communicator must connect. Adding one is a function and its ``@register_dynamic``
line::

    @register_dynamic("ring-shift", directed=True, support=ring_support)
    def ring_shift(n: int, seed: int, t: int) -> nx.DiGraph: ...
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import networkx as nx

from p2pfl.seeding import SHARED, numpy_rng
from topologies.base import TopologyError, canonical
from topologies.generators import complete


@dataclass(frozen=True)
class Dynamic:
    """A per-round topology: `links(n, seed, t)` and the support graph `support(n)`."""

    name: str
    links: Callable[[int, int, int], nx.DiGraph]
    support: Callable[[int], nx.Graph]
    directed: bool
    doc: str


DYNAMIC: dict[str, Dynamic] = {}


def register_dynamic(name: str, *, directed: bool, support: Callable[[int], nx.Graph]
                     ) -> Callable[[Callable[[int, int, int], nx.DiGraph]], Callable[[int, int, int], nx.DiGraph]]:
    """Add `fn(n, seed, t) -> nx.DiGraph` to the dynamic topologies under `name`."""
    def deco(fn: Callable[[int, int, int], nx.DiGraph]) -> Callable[[int, int, int], nx.DiGraph]:
        key = canonical(name)
        if key in DYNAMIC:
            raise TopologyError(f"dynamic topology {key!r} is already registered")
        DYNAMIC[key] = Dynamic(key, fn, support, directed, (fn.__doc__ or "").strip().splitlines()[0])
        return fn
    return deco


def both_ways(graph: nx.Graph) -> nx.DiGraph:
    """The links of an undirected graph: every edge in both directions, on nodes 0..n-1."""
    out = nx.DiGraph()
    out.add_nodes_from(range(graph.number_of_nodes()))
    out.add_edges_from(graph.edges)
    out.add_edges_from((v, u) for u, v in graph.edges)
    return out


def hops(n: int) -> list[int]:
    """The hop lengths 2^0 .. 2^(τ-1), τ = ⌈log2 n⌉, that the one-peer exponential graph cycles through."""
    return [1 << k for k in range(max(1, math.ceil(math.log2(n))))]


def _exponential_support(n: int) -> nx.Graph:
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from((i, (i + h) % n) for h in hops(n) for i in range(n) if (i + h) % n != i)
    return g


@register_dynamic("random-matching", directed=False, support=lambda n: complete(n))
def random_matching(n: int, seed: int, t: int) -> nx.DiGraph:
    """Each round a uniformly random maximal matching of the K peers (one left out if K is odd): pairwise mixing."""
    order = numpy_rng(seed, SHARED, f"matching/{t}").permutation(n)
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from((int(order[k]), int(order[k + 1])) for k in range(0, n - 1, 2))
    return both_ways(g)


@register_dynamic("one-peer-exponential", directed=True, support=_exponential_support)
def one_peer_exponential(n: int, seed: int, t: int) -> nx.DiGraph:
    """Ying et al. (NeurIPS 2021): in round t peer i hears from peer (i + 2^((t-1) mod τ)) mod K, τ = ⌈log2 K⌉."""
    h = hops(n)[(t - 1) % len(hops(n))]
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(((i + h) % n, i) for i in range(n) if (i + h) % n != i)
    return g


def dynamic_names() -> list[str]:
    """The registered dynamic topology names, sorted."""
    return sorted(DYNAMIC)
