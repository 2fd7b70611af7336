"""A per-round topology of one's own, with a parameter, that chooses the round's active peers, as a plug-in:
the one-peer exponential graph with a duty cycle.

    python -m p2pfl.run --plugin examples/plugins/topology.py --topology duty-exponential \
        --topology-params period=3 ...

In round t peer i sleeps when (i + t) mod `period` = 0 (each peer sits out one round in `period`, a different
slice of the peers each round); the awake peers use the one-peer exponential graph (Ying et al., NeurIPS 2021):
i hears from (i + 2^((t-1) mod τ)) mod K, τ = ⌈log2 K⌉, a link kept only when both ends are awake. A per-round
topology is a function of (n, seed, t) and its own keyword parameters, registered with ``@register_dynamic``
(`chooses_active=True`: it returns a `Round` of links and active peers; the others sit the round out, as under
--churn) beside its support: every link it may ever use.
"""
from __future__ import annotations

import networkx as nx

from topologies import Round, TopologyError, register_dynamic
from topologies.dynamic import hops


def exponential_support(n: int) -> nx.Graph:
    """Every link the one-peer exponential graph uses over its τ rounds, undirected."""
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from((i, (i + h) % n) for h in hops(n) for i in range(n) if (i + h) % n != i)
    return g


@register_dynamic("duty-exponential", directed=True, support=exponential_support, chooses_active=True)
def duty_exponential(n: int, seed: int, t: int, period: int = 3) -> Round:
    """The one-peer exponential graph among the awake peers; peer i sleeps in the rounds t with (i + t) % period
    == 0."""
    if isinstance(period, bool) or not isinstance(period, int) or period < 2:
        raise TopologyError(f"duty-exponential: period must be an integer >= 2, got {period!r}")
    awake = frozenset(i for i in range(n) if (i + t) % period != 0)
    h = hops(n)[(t - 1) % len(hops(n))]
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(((i + h) % n, i) for i in sorted(awake) if (i + h) % n != i and (i + h) % n in awake)
    return Round(g, awake)
