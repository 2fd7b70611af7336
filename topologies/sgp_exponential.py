"""The one-peer exponential schedule as Stochastic Gradient Push's published code runs it (Assran et al., ICML 2019;
facebookresearch/stochastic_gradient_push, `gossip/graph_manager.py`, `NPeerDynamicDirectedExponentialGraph` with
its default one peer a round, the graph `GossipDataParallel` and `gossip_sgd.py` build unless told otherwise).

Every peer lists the peers 2^0, 2^1, …, 2^⌊log2(K−1)⌋ hops *ahead* of it (τ = ⌊log2(K−1)⌋ + 1 = ⌈log2 K⌉ of them)
and, at iteration k = 0, 1, … (round t = k + 1), sends to the (k mod τ)-th: peer i sends to i + 2^((t−1) mod τ)
(mod K). Every peer uses the same hop, so each peer hears from exactly one (i − 2^h): the round is a permutation,
its uniform weights (1/2 kept, 1/2 sent) make W_t doubly stochastic and the push-sum weights stay 1 without
failures. `one-peer-exponential` cycles the same hops in the same order the other way round (peer i *hears from*
i + 2^h, so it sends to i − 2^h): the mirror image, equal up to relabelling the peers i -> −i, but not who sends to
whom. (The paper's SLURM scripts pass `--graph_type 0`, `DynamicDirectedExponentialGraph`, whose list alternates
+2^h and −2^h, 2τ entries; this topology is the library's default, graph 5.)
"""
from __future__ import annotations

import networkx as nx

from topologies.dynamic import exponential_cycle, exponential_support, hops, register_dynamic


@register_dynamic("sgp-exponential", directed=True, support=exponential_support, cycle=exponential_cycle)
def sgp_exponential(n: int, seed: int, t: int) -> nx.DiGraph:
    """SGP's published schedule: in round t peer i sends to (i + 2^((t-1) mod τ)) mod K, τ = ⌈log2 K⌉."""
    every = hops(n)
    h = every[(t - 1) % len(every)]
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from((i, (i + h) % n) for i in range(n) if (i + h) % n != i)  # j -> i: i hears from j
    return g
