"""Epidemic Learning (de Vos et al., NeurIPS 2023, "Epidemic Learning: Boosting Decentralized Learning with
Randomized Communication"): every round each peer's model goes to `fanout` = s peers drawn afresh.

- ``epidemic`` (EL-Local): each peer sends to s peers drawn uniformly without replacement among the others, one
  way; a receiver averages what arrived with its own model, 1/(1 + messages received) each (the schedule's uniform
  weights over a one-way round's closed in-neighbourhood). Row-stochastic, not column-stochastic: the mean drifts.
- ``epidemic-oracle`` (EL-Oracle): the round's graph is a random s-regular graph (both ways; asymptotically
  uniform), mixed by ``--mixing`` (Metropolis and uniform both give 1/(s+1) on it: doubly stochastic).

- ``random-regular`` (static): one random `degree`-regular graph for the whole run, drawn from the stream (seed,
  SHARED, "topology"): the paper's D-PSGD baseline at equal messages a round (degree = s).

Every per-round draw comes from the shared stream (seed, SHARED, "<name>/<round>"): a pure function of (seed,
round), the same on every rank. Both per-round ones use any pair of peers over a run: their support is complete.
"""
from __future__ import annotations

from collections.abc import Callable

import networkx as nx
import numpy as np

from topologies.base import TopologyError, register
from topologies.dynamic import both_ways, register_dynamic
from topologies.generators import complete
from topologies.streams import SHARED, numpy_rng


def check_fanout(name: str, n: int, fanout: object, option: str = "fanout") -> int:
    """`fanout` as an int in [1, n − 1]; TopologyError naming the topology and its `option` otherwise."""
    if isinstance(fanout, bool) or not isinstance(fanout, int) or not 1 <= fanout <= n - 1:
        raise TopologyError(f"topology {name!r}: {option} must be an integer in [1, K-1] = [1, {n - 1}] on {n} "
                            f"peers, got {fanout!r}")
    return fanout


def check_regular(name: str, n: int, degree: object, option: str = "fanout") -> int:
    """`check_fanout`, and n·degree even: a degree-regular graph on n peers exists."""
    d = check_fanout(name, n, degree, option)
    if n * d % 2:
        raise TopologyError(f"topology {name!r}: no {d}-regular graph on {n} peers (K·{option} = {n * d} is odd); "
                            f"use an even {option} or an even number of peers")
    return d


def _support(name: str, check: Callable[[str, int, object], int]) -> Callable[..., nx.Graph]:
    """The complete graph on n peers, once `check` has accepted the fanout (bad input named before training)."""
    def support(n: int, fanout: int = 1) -> nx.Graph:
        check(name, n, fanout)
        return complete(n)
    return support


def _regular(n: int, degree: int, rng: np.random.Generator) -> nx.Graph:
    """A random `degree`-regular simple graph on 0..n-1 (networkx's pairing model, seeded from `rng`: asymptotically
    uniform over such graphs as n grows, not exactly at small n)."""
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from(nx.random_regular_graph(degree, n, seed=int(rng.integers(1 << 32))).edges)
    return g


def targets(n: int, seed: int, t: int, fanout: int) -> np.ndarray:
    """The n × fanout peers each peer sends to in round t of EL-Local: row j is a uniform draw of `fanout` distinct
    peers other than j (Floyd's sampling, all rows at once, from the stream (seed, SHARED, "epidemic/t"))."""
    rng = numpy_rng(seed, SHARED, f"epidemic/{t}")
    m = n - 1  # candidates 0..m-1 stand for the other peers, in order
    chosen = np.empty((n, fanout), dtype=np.int64)
    for k, top in enumerate(range(m - fanout, m)):
        pick = rng.integers(0, top + 1, size=n)
        taken = (chosen[:, :k] == pick[:, None]).any(axis=1)
        chosen[:, k] = np.where(taken, top, pick)
    own = np.arange(n, dtype=np.int64)[:, None]
    return chosen + (chosen >= own)  # skip the sender itself


#: --fanout S, the flag of every topology with a fan-out (its help line, declared by each that takes it)
FANOUT = {"fanout": "models each peer sends a round (s: epidemic, epidemic-oracle), hops (k-peer-exponential)"}


@register_dynamic("epidemic", directed=True, support=_support("epidemic", check_fanout), flags=FANOUT)
def epidemic(n: int, seed: int, t: int, fanout: int = 1) -> nx.DiGraph:
    """EL-Local (de Vos et al., NeurIPS 2023): each round every peer sends to `fanout` random peers (one way)."""
    to = targets(n, seed, t, check_fanout("epidemic", n, fanout))
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(zip(np.repeat(np.arange(n), fanout).tolist(), to.ravel().tolist()))
    return g


@register_dynamic("epidemic-oracle", directed=False, support=_support("epidemic-oracle", check_regular), flags=FANOUT)
def epidemic_oracle(n: int, seed: int, t: int, fanout: int = 1) -> nx.DiGraph:
    """EL-Oracle (de Vos et al., NeurIPS 2023): each round a random `fanout`-regular graph (both ways)."""
    d = check_regular("epidemic-oracle", n, fanout)
    return both_ways(_regular(n, d, numpy_rng(seed, SHARED, f"epidemic-oracle/{t}")))


@register("random-regular")
def random_regular(n: int, seed: int = 0, degree: int = 3, max_tries: int = 100) -> nx.Graph:
    """A random `degree`-regular graph, fixed for the run (D-PSGD's baseline in Epidemic Learning), redrawn from
    the "topology" stream while disconnected (at most max_tries draws)."""
    d = check_regular("random-regular", n, degree, "degree")
    rng = numpy_rng(seed, SHARED, "topology")
    for _ in range(max_tries):
        g = _regular(n, d, rng)
        if nx.is_connected(g):
            return g
    raise TopologyError(f"topology 'random-regular': {d}-regular graphs on {n} peers were disconnected in all "
                        f"{max_tries} draws; raise the degree")
