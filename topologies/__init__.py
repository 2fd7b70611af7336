"""Topologies of the peer graph, their mixing matrices and statistics (SPEC §1).

Adding a topology is one function in one file plus its registration (its keyword parameters are given with
``--topology-params size=4``; a per-round one is registered with ``register_dynamic``, topologies.dynamic)::

    @register("ring-of-cliques", aliases=("roc",), flags={"size": "peers a clique (ring-of-cliques)"})
    def ring_of_cliques(n: int, seed: int = 0, size: int = 4) -> nx.Graph: ...

(`aliases`: other names it answers to, recorded as its own; `flags`: parameters that are flags of their own too,
``--size 4``).

The package imports nothing of p2pfl (p2pfl builds on it): its random streams (topologies.streams) and the shape
of its manifest record (topologies.records) are defined here and re-exported by p2pfl.seeding and p2pfl.records.
"""
from __future__ import annotations

from topologies import (  # noqa: F401  (register the builtins)
    base_graph,
    epidemic,
    exponential,
    from_file,
    generators,
    grids,
    hypercube,
    k_peer_exponential,
    sgp_exponential,
    teleport,
)
from topologies.base import TopologyError, build, names, parse_params, register, registry
from topologies.dynamic import (
    DYNAMIC,
    Dynamic,
    Round,
    both_ways,
    choices,
    dynamic_names,
    register_dynamic,
    topology_params,
)
from topologies.from_file import read_graph
from topologies.measures import N_EFF_GAMMA
from topologies.mixing import KINDS as MIXING_KINDS
from topologies.mixing import mixing_matrix, mixing_weights, register_mixing
from topologies.stats import describe, mixing_of, sparse_mixing_of, statistics

__all__ = [
    "DYNAMIC",
    "Dynamic",
    "MIXING_KINDS",
    "N_EFF_GAMMA",
    "Round",
    "TopologyError",
    "both_ways",
    "build",
    "choices",
    "describe",
    "draw",
    "dynamic_names",
    "mixing_matrix",
    "mixing_of",
    "mixing_weights",
    "names",
    "parse_params",
    "read_graph",
    "register",
    "register_dynamic",
    "register_mixing",
    "registry",
    "sparse_mixing_of",
    "statistics",
    "topology_params",
]


def __getattr__(name: str) -> object:
    """`draw` imported when first asked for: importing topologies does not import matplotlib."""
    if name == "draw":
        from topologies.plot import draw
        return draw
    raise AttributeError(f"module 'topologies' has no attribute {name!r}")
