"""The event order of asynchronous gossip (AD-PSGD, SPEC §9): who averages with whom, and when, in simulated time.

Peer i computes its n-th local update from the moment its (n−1)-th average ended, for steps_i · c_i seconds; it
then averages pairwise with a neighbour j drawn from the stream (seed, i, "async/<n>"), which takes the slower of
the two messages, max(a_ij + S/min(U_i, D_j), a_ji + S/min(U_j, D_i)). The neighbour does not stop computing: its
model changes under it, and its own update, computed on the model it held when it started, is then stale by one
more average. Each peer's times depend only on its own draws, so the whole order is a pure function of the seed,
the graph and the network model (never of the data or the ranks), and every rank computes it alike.

Pairs with no peer in common commute, so the order is executed as batches of disjoint pairs (`batches`), each
peer's events in their order: the same result as one event at a time. With every step time equal and no latency,
every peer's n-th average happens at n · steps · c, the synchronous steps.
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import networkx as nx

from p2pfl.network.timing import NetworkModel
from p2pfl.seeding import numpy_rng


@dataclass(frozen=True, order=True)
class Event:
    """Peer `peer` finished its local update number `update` (from 1) and averaged with `partner` at `time`;
    `staleness`: how many averages of others changed its model while it computed that update."""

    time: float
    peer: int
    partner: int
    update: int
    staleness: int


def pair_seconds(model: NetworkModel, i: int, j: int, size: int) -> float:
    """Seconds of i and j exchanging their S-byte models (the slower of the two messages; the pair's transfers
    are the only ones on its ends' links)."""
    return max(model.transfers({(i, j): size, (j, i): size}).values())


def schedule(model: NetworkModel, graph: nx.Graph, seed: int, steps: Mapping[int, float], size: int, *,
             until: float = math.inf, updates: int | None = None) -> list[Event]:
    """The events in time order (ties: by peer) up to simulated time `until` or the first `updates` of them."""
    assert until < math.inf or updates is not None, "an asynchronous run needs an end"
    neighbours = {p: sorted(graph.neighbors(p)) for p in graph.nodes}
    pair_cost: dict[tuple[int, int], float] = {}

    def next_event(peer: int, start: float, n: int) -> tuple[float, int, int, int]:
        partner = neighbours[peer][int(numpy_rng(seed, peer, f"async/{n}").integers(len(neighbours[peer])))]
        key = (peer, partner)
        if key not in pair_cost:
            pair_cost[key] = pair_seconds(model, peer, partner, size)
        return start + steps[peer] * float(model.compute[peer]) + pair_cost[key], peer, partner, n

    heap = [next_event(p, 0.0, 1) for p in sorted(neighbours) if neighbours[p]]
    heapq.heapify(heap)
    changed = dict.fromkeys(neighbours, 0)
    out: list[Event] = []
    while heap and (updates is None or len(out) < updates):
        time, peer, partner, n = heapq.heappop(heap)
        if time > until:
            break
        out.append(Event(time, peer, partner, n, changed[peer]))
        changed[peer] = 0
        changed[partner] += 1
        heapq.heappush(heap, next_event(peer, time, n + 1))
    return out


def batches(events: Sequence[Event], cuts: Sequence[float] = ()) -> list[list[Event]]:
    """The events as batches of disjoint pairs, as few as the order allows: an event goes into the batch after
    the last one that touched either of its peers, so each peer meets its events in their order (the result is
    the sequential one) while pairs that share no peer run together. No batch mixes events on both sides of a
    time in `cuts` (the evaluation times: every event at or before a cut is done before it)."""
    out: list[list[Event]] = []
    last: dict[int, int] = {}
    cut_times = sorted(cuts)
    c, floor = 0, 0
    for event in events:
        while c < len(cut_times) and event.time > cut_times[c]:
            c += 1
            floor = len(out)
        b = max(floor, last.get(event.peer, -1) + 1, last.get(event.partner, -1) + 1)
        if b == len(out):
            out.append([])
        out[b].append(event)
        last[event.peer] = last[event.partner] = b
    return out


__all__ = ["Event", "batches", "pair_seconds", "schedule"]
