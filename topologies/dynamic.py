"""Topologies that change every round: the graph of round t is a pure function of (n, seed, t) and the
topology's own parameters.

A dynamic topology gives each round's links as a directed graph (an edge j -> i: peer i hears from peer j; an
undirected topology lists both directions) and its support, the undirected union of every link it can use,
which is what the exchange's communicator must connect. Adding one is a function and its ``@register_dynamic``
line; its keyword parameters after (n, seed, t) are its own (given as ``--topology-params q=0.5``), and one
registered with ``chooses_active=True`` returns a `Round`: the links and the peers that take part in round t
(the others sit it out, as under churn); one registered with ``weighted=True`` gives each link its mixing weight as
the edge attribute ``weight`` (W_ij on the edge j -> i), which the schedule mixes by instead of ``--mixing``; one
that repeats gives its `Cycle` (``cycle=fn(n, **params)``): its period and the round after which the product of its
mixing matrices is exactly the average, recorded in the manifest::

    @register_dynamic("ring-shift", directed=True, support=ring_support)
    def ring_shift(n: int, seed: int, t: int, stride: int = 1) -> nx.DiGraph: ...
"""
from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, TypeVar

import networkx as nx

from topologies.base import (
    ALIASES,
    FLAGS,  # noqa: F401  (declared in topologies.base, static topologies having flags too; read from here)
    TopologyError,
    add_aliases,
    canonical,
    check_params,
    declare_flags,
    names,
    parse_params,
    registry,
    spelled,
)
from topologies.generators import complete
from topologies.streams import SHARED, numpy_rng

T = TypeVar("T")


class Cycle(NamedTuple):
    """A schedule that repeats: its period in rounds, and the round after which the product of its mixing
    matrices W_t … W_1 is exactly J = 11ᵀ/K (None: never exactly)."""

    period: int | None
    exact: int | None


class Round(NamedTuple):
    """One round of a dynamic topology that chooses who takes part: its links and its active peers, and (a topology
    that moves models, teleport) `handover`: receiver -> sender, each active receiver first taking the model its
    sender holds from the round before."""

    links: nx.DiGraph
    active: frozenset[int]
    handover: Mapping[int, int] = {}


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
    weighted: bool = False  # each link carries its weight W_ij (edge attribute "weight"), mixed by instead of --mixing
    cycle: Callable[..., Cycle] | None = None  # fn(n[, **params]): its period and exact-consensus round
    hands_over: bool = False  # its Rounds hand models from one round's peers to the next's (`Round.handover`)

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
            handover = {int(i): int(j) for i, j in out.handover.items()}
            if any(i not in out.active or not 0 <= j < n or i == j for i, j in handover.items()):
                raise TopologyError(f"dynamic topology {self.name!r}: round {t} hands a model to a peer not active, "
                                    f"from one outside 0..{n - 1} or to itself")
            return Round(out.links, frozenset(int(p) for p in out.active), handover)
        return Round(out, frozenset(range(n)))

    def _on(self, fn: Callable[..., T], n: int) -> T:
        """fn(n, **the parameters it takes)."""
        takes = [p for p in inspect.signature(fn).parameters if p != "n"]
        return fn(n, **{k: v for k, v in self.params.items() if k in takes})

    def support_of(self, n: int) -> nx.Graph:
        """The support graph on n peers (given the parameters when its function takes them)."""
        return self._on(self.support, n)

    def cycle_of(self, n: int) -> Cycle:
        """Its period and exact-consensus round on n peers (both None when it declares no cycle)."""
        return Cycle(None, None) if self.cycle is None else self._on(self.cycle, n)


DYNAMIC: dict[str, Dynamic] = {}


def register_dynamic(name: str, *, directed: bool, support: Callable[..., nx.Graph], chooses_active: bool = False,
                     weighted: bool = False, cycle: Callable[..., Cycle] | None = None, hands_over: bool = False,
                     flags: Mapping[str, str] | None = None, aliases: tuple[str, ...] = ()
                     ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add `fn(n, seed, t, **params) -> nx.DiGraph` (a `Round` when `chooses_active`; its links weighted when
    `weighted`; `cycle(n, **params)` its period and exact-consensus round; `hands_over`: its Rounds move models
    between peers, `Round.handover`; `flags`: its parameters that are flags of their own, each with its help line;
    `aliases`: other names it answers to) under `name`."""
    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        key = canonical(name)
        if key in DYNAMIC or spelled(name) in ALIASES:
            raise TopologyError(f"dynamic topology {key!r} is already registered")
        declare_flags(key, fn, flags)
        add_aliases(key, aliases, lambda a: a in DYNAMIC or a in registry)
        DYNAMIC[key] = Dynamic(key, fn, support, directed, (fn.__doc__ or "").strip().splitlines()[0],
                               chooses_active, weighted=weighted, cycle=cycle, hands_over=hands_over)
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


def exponential_support(n: int) -> nx.Graph:
    """The undirected union of every hop i -> i + 2^j (mod K) of the exponential graph."""
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from((i, (i + h) % n) for h in hops(n) for i in range(n) if (i + h) % n != i)
    return g


def exponential_links(n: int, t: int, fanout: int = 1) -> nx.DiGraph:
    """Round t of the k-peer exponential graph (k = fanout): peer i hears from i + 2^h (mod K) for the `fanout`
    hops h = (t−1)·k, …, (t−1)·k + k − 1 taken cyclically mod τ = ⌈log2 K⌉ (k = 1: the one-peer graph)."""
    every = hops(n)
    chosen = [every[((t - 1) * fanout + r) % len(every)] for r in range(fanout)]
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(((i + h) % n, i) for h in chosen for i in range(n) if (i + h) % n != i)
    return g


def exponential_cycle(n: int, fanout: int = 1) -> Cycle:
    """Period τ/gcd(τ, k) of the k-peer exponential graph; exact averaging after τ rounds when k = 1 and K = 2^τ
    (Ying et al. 2021, Theorem 1), never otherwise."""
    tau = len(hops(n))
    return Cycle(tau // math.gcd(tau, fanout), tau if fanout == 1 and n == 1 << tau else None)


@register_dynamic("random-matching", directed=False, support=lambda n: complete(n))
def random_matching(n: int, seed: int, t: int) -> nx.DiGraph:
    """Each round a uniformly random maximal matching of the K peers (one left out if K is odd): pairwise mixing."""
    order = numpy_rng(seed, SHARED, f"matching/{t}").permutation(n)
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from((int(order[k]), int(order[k + 1])) for k in range(0, n - 1, 2))
    return both_ways(g)


@register_dynamic("one-peer-exponential", directed=True, support=exponential_support, cycle=exponential_cycle)
def one_peer_exponential(n: int, seed: int, t: int) -> nx.DiGraph:
    """Ying et al. (NeurIPS 2021): in round t peer i hears from peer (i + 2^((t-1) mod τ)) mod K, τ = ⌈log2 K⌉."""
    return exponential_links(n, t)


def dynamic_names() -> list[str]:
    """The registered dynamic topology names, sorted."""
    return sorted(DYNAMIC)


class Choices(list):
    """Every topology name as an option's choices: static ones, dynamic ones, then 'file', each shown with its
    aliases ("cycle (ring)"); `in` takes any spelling `canonical` takes; `canonical` gives the name a run records
    (a value naming no topology kept as written); `spellings`: every name and alias (what "did you mean" offers)."""

    def __init__(self) -> None:
        ordered = [n for n in names() if n != "file"] + dynamic_names() + (["file"] if "file" in registry else [])
        others = {key: [a for a, k in sorted(ALIASES.items()) if k == key] for key in ordered}
        super().__init__(f"{key} ({', '.join(others[key])})" if others[key] else key for key in ordered)
        self.spellings = [*ordered, *(a for key in ordered for a in others[key])]

    def __contains__(self, value: object) -> bool:
        return isinstance(value, str) and (canonical(value) in registry or canonical(value) in DYNAMIC)

    def canonical(self, value: str) -> str:
        """The name a run records for `value` (``ring`` -> ``cycle``, ``Binary_Tree`` -> ``binary-tree``)."""
        return canonical(value) if value in self else value


def choices() -> Choices:
    """The topologies as the --topology option's choices (`Choices`)."""
    return Choices()


def takes(name: str) -> frozenset[str]:
    """The keyword parameters topology `name` takes (static or dynamic; none for an unknown name)."""
    key = canonical(name)
    fn = DYNAMIC[key].links if key in DYNAMIC else registry.get(key)
    if fn is None:
        return frozenset()
    skip = ("n", "seed", "t") if key in DYNAMIC else ("n", "seed")
    return frozenset(p for p in inspect.signature(fn).parameters if p not in skip)


def flag_owners(param: str) -> list[str]:
    """The topologies (static or dynamic) that take `param`, sorted: those a flag of FLAGS applies to."""
    return sorted(k for k in {*DYNAMIC, *registry} if param in takes(k))


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
