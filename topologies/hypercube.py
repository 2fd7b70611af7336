"""The hypercube (used as a baseline by Ying et al., NeurIPS 2021, and Takezawa et al., NeurIPS 2023): K = 2^d peers,
i linked to i XOR 2^j for j = 0..d−1, degree d = log2 K. Regular, so every `--mixing` gives 1/(d + 1) on the closed
neighbourhood (symmetric, doubly stochastic). Only for K a power of 2: other K are refused in one line.
"""
from __future__ import annotations

import networkx as nx

from topologies.base import TopologyError, register


@register("hypercube")
def hypercube(n: int, seed: int = 0) -> nx.Graph:
    """K = 2^d peers, i linked to i XOR 2^j (j < d): the d-dimensional hypercube."""
    if n & (n - 1):
        raise TopologyError(f"topology 'hypercube' needs a power of 2 peers (2, 4, 8, 16, ...), got {n}")
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from((i, i ^ (1 << j)) for j in range(n.bit_length() - 1) for i in range(n) if i < i ^ (1 << j))
    return g
