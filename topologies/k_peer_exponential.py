"""The k-peer exponential graph: the one-peer exponential graph of Ying et al. (NeurIPS 2021) with k = `fanout` hops
a round. Round t uses the hops 2^h for h = (t−1)·k, …, (t−1)·k + k − 1 taken cyclically mod τ = ⌈log2 K⌉: peer i
hears from i + 2^h (mod K), so each peer sends to k of its exponential-graph out-neighbours a round, cycling through
all τ of them. One-way; each peer averages its k + 1 values uniformly (the schedule's weights on a one-way round),
and since every round is a circulant, W_t is doubly stochastic. k = 1 is `one-peer-exponential`, round for round;
k = τ is the static one-way exponential graph every round. Period τ/gcd(τ, k); exact averaging only for k = 1 on
K = 2^τ peers (after τ rounds).
"""
from __future__ import annotations

import networkx as nx

from topologies.base import TopologyError
from topologies.dynamic import Cycle, exponential_cycle, exponential_links, exponential_support, hops, register_dynamic
from topologies.epidemic import FANOUT


def _fanout(n: int, fanout: object) -> int:
    """`fanout` as an int in [1, τ]; TopologyError naming the topology otherwise."""
    tau = len(hops(n))
    if isinstance(fanout, bool) or not isinstance(fanout, int) or not 1 <= fanout <= tau:
        raise TopologyError(f"topology 'k-peer-exponential': fanout must be an integer in [1, ⌈log2 K⌉] = [1, {tau}] "
                            f"on {n} peers, got {fanout!r}")
    return fanout


def _support(n: int, fanout: int = 1) -> nx.Graph:
    _fanout(n, fanout)
    return exponential_support(n)


def _cycle(n: int, fanout: int = 1) -> Cycle:
    return exponential_cycle(n, _fanout(n, fanout))


@register_dynamic("k-peer-exponential", directed=True, support=_support, cycle=_cycle, flags=FANOUT)
def k_peer_exponential(n: int, seed: int, t: int, fanout: int = 1) -> nx.DiGraph:
    """Each round peer i hears from i + 2^h (mod K) for k = fanout hops h, cycling through the τ = ⌈log2 K⌉ hops."""
    return exponential_links(n, t, _fanout(n, fanout))
