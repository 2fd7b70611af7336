"""Topologies of the peer graph, their mixing matrices and statistics (SPEC §1).

Adding a topology is one function in one file plus its registration::

    @register("ring-of-cliques")
    def ring_of_cliques(n: int, seed: int = 0, size: int = 4) -> nx.Graph: ...
"""
from __future__ import annotations

from topologies import from_file, generators  # noqa: F401  (register the builtins)
from topologies.base import TopologyError, build, names, register, registry
from topologies.dynamic import DYNAMIC, Dynamic, both_ways, dynamic_names, register_dynamic
from topologies.from_file import read_graph
from topologies.measures import N_EFF_GAMMA
from topologies.mixing import KINDS as MIXING_KINDS
from topologies.mixing import mixing_matrix, mixing_weights, register_mixing
from topologies.plot import draw
from topologies.stats import describe, mixing_of, sparse_mixing_of, statistics

__all__ = [
    "DYNAMIC",
    "Dynamic",
    "MIXING_KINDS",
    "N_EFF_GAMMA",
    "TopologyError",
    "both_ways",
    "build",
    "describe",
    "draw",
    "dynamic_names",
    "mixing_matrix",
    "mixing_of",
    "mixing_weights",
    "names",
    "read_graph",
    "register",
    "register_dynamic",
    "register_mixing",
    "registry",
    "sparse_mixing_of",
    "statistics",
]
