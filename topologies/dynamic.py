"""Topologies that change every round: the graph of round t is a pure function of (n, seed, t) and the
topology's own parameters.

A dynamic topology gives each round's links as a directed graph (an edge j -> i: peer i hears from peer j; an
undirected topology lists both directions) and its support, the undirected union of every link it can use,
which is what the exchange's communicator must connect. Adding one is a function and its ``@register_dynamic``
line; its keyword parameters after (n, seed, t) are its own (given as ``--topology-params q=0.5``), and one
registered with ``chooses_active=True`` returns a `Round`: the links and the peers that take part in round t
(the others sit it out, as under churn)::

    @register_dynamic("ring-shift", directed=True, support=ring_support)
    def ring_shift(n: int, seed: int, t: int, stride: int = 1) -> nx.DiGraph: ...
"""
from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import networkx as nx

from topologies.base import TopologyError, canonical, check_params, parse_params, registry
from topologies.generators import complete
from topologies.streams import SHARED, numpy_rng


class Round(NamedTuple):
    """One round of a dynamic topology that chooses who takes part: its links and its active peers."""

    links: nx.DiGraph
    active: frozenset[int]


@dataclass(frozen=True)
class Dynamic:
    """A per-round topology: `links(n, seed, t, **params)` and the support graph `support(n[, **params])`, with
    the parameters it was bound to (`bind`)."""

    name: str
    links: Callable[..., nx.DiGraph | Round]
    support: Callable[..., nx.Graph]
    directed: bool
    doc: str
    chooses_active: bool = False  # `links` returns a Round: some peers sit some rounds out
    params: Mapping[str, Any] = field(default_factory=dict)

    def bind(self, **params: Any) -> Dynamic:
        """This topology with its parameters set; TopologyError naming what it takes when it does not take one."""
        check_params(self.name, self.links, params, fixed=("n", "seed", "t"))
        return replace(self, params={**self.params, **params})

    def round(self, n: int, seed: int, t: int) -> Round:
        """Round t's links and active peers (every peer unless the topology chooses)."""
        out = self.links(n, seed, t, **self.params)
        if isinstance(out, Round):
            outside = sorted(p for p in out.active if not 0 <= p < n)
            if outside:
                raise TopologyError(f"dynamic topology {self.name!r}: round {t} activates peers outside 0..{n - 1}")
            return Round(out.links, frozenset(int(p) for p in out.active))
        return Round(out, frozenset(range(n)))

    def support_of(self, n: int) -> nx.Graph:
        """The support graph on n peers (given the parameters when its function takes them)."""
        takes = [p for p in inspect.signature(self.support).parameters if p != "n"]
        return self.support(n, **{k: v for k, v in self.params.items() if k in takes})


DYNAMIC: dict[str, Dynamic] = {}


def register_dynamic(name: str, *, directed: bool, support: Callable[..., nx.Graph], chooses_active: bool = False
                     ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add `fn(n, seed, t, **params) -> nx.DiGraph` (a `Round` when `chooses_active`) under `name`."""
    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        key = canonical(name)
        if key in DYNAMIC:
            raise TopologyError(f"dynamic topology {key!r} is already registered")
        DYNAMIC[key] = Dynamic(key, fn, support, directed, (fn.__doc__ or "").strip().splitlines()[0],
                               chooses_active)
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


def topology_params(name: str, text: str | None) -> dict[str, Any]:
    """The parameters `text` (``KEY=VALUE,...``) gives topology `name`, static or dynamic, checked against what
    its function takes (TopologyError otherwise; an unknown name is left to `build` and DYNAMIC's users)."""
    params = parse_params(text)
    key = canonical(name)
    if key in DYNAMIC:
        DYNAMIC[key].bind(**params)
    elif key in registry:
        check_params(key, registry[key], params)
    return params
