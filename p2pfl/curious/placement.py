"""Where the curious peers sit: a list of peers, or a fraction of the K peers placed by degree, by betweenness
centrality or at random (the shared stream (seed, SHARED, "curious"), so every rank draws the same set and the
choice never depends on how peers sit on ranks)."""
from __future__ import annotations

import math

import networkx as nx

from p2pfl.seeding import SHARED, numpy_rng

#: How a fraction of curious peers is placed (--curious-placement).
PLACEMENTS = ("degree", "centrality", "random")


def parse_curious(spec: str) -> tuple[int, ...] | float:
    """--curious as written: a fraction in (0, 1) ('0.2', '20%') or a list of peers ('3' or '3,7').
    ValueError naming --curious otherwise."""
    text = spec.strip()
    try:
        if text.endswith("%"):
            value = float(text[:-1]) / 100
        elif "." in text:
            value = float(text)
        else:
            peers = tuple(sorted({int(p) for p in text.split(",")}))
            if not peers or min(peers) < 0:
                raise ValueError
            return peers
    except ValueError:
        raise ValueError(f"--curious: expected a list of peers (3,7) or a fraction (0.2, 20%), got {spec!r}") from None
    if not 0 < value < 1:
        raise ValueError(f"--curious: a fraction of the peers lies in (0, 1), got {spec!r}")
    return value


def curious_count(fraction: float, n_peers: int) -> int:
    """How many peers a fraction makes curious: ⌈fraction·K⌉ (at least one)."""
    return max(1, math.ceil(fraction * n_peers - 1e-9))


def choose_curious(spec: str, graph: nx.Graph, placement: str, seed: int) -> frozenset[int]:
    """The curious peers of `spec` on `graph` (its nodes 0..K-1). A fraction takes the ⌈f·K⌉ peers of highest
    degree or betweenness centrality (ties to the lower id), or a uniform draw; ValueError naming --curious when a
    listed peer does not exist or no peer would be left to attack."""
    n = graph.number_of_nodes()
    parsed = parse_curious(spec)
    if isinstance(parsed, tuple):
        if parsed[-1] >= n:
            raise ValueError(f"--curious: peer {parsed[-1]} does not exist (peers are 0..{n - 1})")
        chosen = frozenset(parsed)
    else:
        count = curious_count(parsed, n)
        if placement == "random":
            chosen = frozenset(int(p) for p in numpy_rng(seed, SHARED, "curious").choice(n, count, replace=False))
        else:
            score = (dict(graph.degree()) if placement == "degree"
                     else nx.betweenness_centrality(graph, normalized=True))
            chosen = frozenset(sorted(range(n), key=lambda p: (-score[p], p))[:count])
    if len(chosen) >= n:
        raise ValueError(f"--curious: {len(chosen)} curious peers leave no peer to attack among {n}")
    return chosen
