"""The static exponential graph (Ying et al., NeurIPS 2021, "Exponential Graph is Provably Efficient for
Decentralized Deep Training"; Bluefog's ``ExponentialTwoGraph``): peer i linked to i ± 2^j (mod K) for
j = 0, …, ⌊log2(K − 1)⌋, the same hops the one-peer exponential graph cycles through.

The paper's graph is one-way (i sends to i + 2^j, weights 1/(τ + 1), τ = ⌈log2 K⌉); here a topology is undirected
(SPEC §1), so each hop is used both ways. The graph is a circulant, hence regular: `--mixing` metropolis, uniform and
max-degree all give 1/(degree + 1) on the closed neighbourhood, symmetric and doubly stochastic. Degree 2τ at most
(2τ − 1 when K is a power of 2: i + 2^(τ−1) = i − 2^(τ−1)); fewer where two hops meet (K = 24: 8 + 16 = 24).
"""
from __future__ import annotations

import networkx as nx

from topologies.base import register
from topologies.dynamic import hops


@register("exponential")
def exponential(n: int, seed: int = 0) -> nx.Graph:
    """Peer i linked to i ± 2^j mod K, j = 0..⌊log2(K−1)⌋ (Ying et al. 2021's exponential graph, both ways)."""
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from((i, (i + h) % n) for h in hops(n) for i in range(n) if (i + h) % n != i)
    return g
