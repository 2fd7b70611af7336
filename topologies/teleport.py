"""Teleportation (Takezawa and Stich, "Scalable Decentralized Learning with Teleportation", ICLR 2025): each round
only `active` = k of the K peers take part; the k models move ("teleport") to the round's active peers, which train
them on their own data and gossip on a small graph among themselves.

The k models sit in k slots, the nodes 0..k-1 of the inner graph (`inner`, any static topology's name: ``cycle``
by default, built on k nodes with the run's seed). Round t draws an ordered set of k distinct peers, uniformly, from
the stream (seed, SHARED, "teleport/t"): the i-th drawn holds slot i in round t. Before training, the holder of
slot i in round t takes slot i's model from its holder in round t − 1 (`Round.handover`; nothing moves where the
holder is the same peer; round 1 starts from the drawn peers' own models). The round's links are the inner graph's
edges between the slots' holders, both ways, mixed by ``--mixing``. A peer not drawn sits the round out and keeps
the last model it held, which is what it is scored with. Any two peers may be linked over a run: the support is
complete.

``--topology teleport --active k [--inner NAME]`` (or ``--topology-params active=k,inner=NAME``).
"""
from __future__ import annotations

import functools

import networkx as nx
import numpy as np

from topologies.base import TopologyError, build, canonical, registry
from topologies.dynamic import Round, register_dynamic
from topologies.generators import complete
from topologies.streams import SHARED, numpy_rng


def check_active(n: int, active: object) -> int:
    """`active` as an int in [2, n]; TopologyError naming the topology otherwise."""
    if isinstance(active, bool) or not isinstance(active, int) or not 2 <= active <= n:
        raise TopologyError(f"topology 'teleport': active must be an integer in [2, K] = [2, {n}] on {n} peers, "
                            f"got {active!r}")
    return active


@functools.lru_cache(maxsize=16)
def inner_graph(k: int, inner: str, seed: int) -> nx.Graph:
    """The inner graph on the k slots: the static topology `inner` on k nodes (TopologyError naming it when it is
    unknown or cannot be built on k)."""
    if not isinstance(inner, str) or canonical(inner) not in registry:
        raise TopologyError(f"topology 'teleport': inner must name a static topology ({', '.join(sorted(registry))})"
                            f", got {inner!r}")
    return build(inner, k, seed=seed)


def holders(n: int, seed: int, t: int, active: int) -> np.ndarray:
    """The peers holding slots 0..k-1 in round t: k distinct peers drawn uniformly, in order, from the stream
    (seed, SHARED, "teleport/t")."""
    return numpy_rng(seed, SHARED, f"teleport/{t}").choice(n, size=active, replace=False)


def _support(n: int, active: int = 2, inner: str = "cycle") -> nx.Graph:
    """The complete graph (any two peers may hold linked slots), once `active` and `inner` are checked."""
    inner_graph(check_active(n, active), inner, 0)
    return complete(n)


@register_dynamic("teleport", directed=False, support=_support, chooses_active=True, hands_over=True, flags={
    "active": "peers active a round, holding the k models (teleport)",
    "inner": "the static topology the active peers gossip on, over the k slots (teleport)"})
def teleport(n: int, seed: int, t: int, active: int = 2, inner: str = "cycle") -> Round:
    """Teleportation (Takezawa and Stich, ICLR 2025): k = active peers a round hold the k models, handed on from the
    round before, and gossip on the inner graph among themselves."""
    k = check_active(n, active)
    graph = inner_graph(k, inner, seed)
    now = holders(n, seed, t, k).tolist()
    links = nx.DiGraph()
    links.add_nodes_from(range(n))
    links.add_edges_from((now[a], now[b]) for a, b in graph.edges)
    links.add_edges_from((now[b], now[a]) for a, b in graph.edges)
    before = holders(n, seed, t - 1, k).tolist() if t >= 2 else now
    return Round(links, frozenset(now), {i: j for i, j in zip(now, before) if i != j})
