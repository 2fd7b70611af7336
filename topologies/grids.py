"""The 2-D grids of peers: the torus (periodic: the Cartesian product of two cycles, each peer 4 neighbours) and the
grid (no wrap-around: 2, 3 or 4 neighbours at the corners, edges and inside), baselines of decentralised learning
between the cycle and the complete graph.

``--topology torus --rows R``: the K peers in R rows of C = K/R, peer r·C + c at row r and column c (row-major);
without --rows the most square R (the largest divisor of K at most √K). R and C must both be at least 2 and R must
divide K: anything else is refused in one line. The graph is simple: a torus side of 2 wraps onto itself, and its
two links between the same two peers are one link, so those peers have 3 neighbours (2 on a 2 x 2 torus, a 4-cycle).
"""
from __future__ import annotations

import math

import networkx as nx

from topologies.base import TopologyError, register

#: --rows R, the flag of both grids
ROWS = {"rows": "rows R of the 2-D grid (torus, grid): K/R peers a row, numbered row by row (default: the most "
                "square R)"}


def sides(name: str, n: int, rows: int | None) -> tuple[int, int]:
    """(rows, columns) of topology `name` on n peers: `rows`, or the most square when None; TopologyError naming
    --rows and --peers when they make no grid of at least 2 x 2."""
    if rows is None:
        rows = max((r for r in range(2, math.isqrt(n) + 1) if n % r == 0), default=None)
        if rows is None:
            raise TopologyError(f"topology {name!r}: --peers {n} is no product R x C with R, C >= 2 (4, 6, 8, 9, ...)"
                                "; a 2-D grid needs one")
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise TopologyError(f"topology {name!r}: --rows must be an integer >= 2, got {rows!r}")
    if n % rows:
        raise TopologyError(f"topology {name!r}: --rows {rows} does not divide --peers {n} (R rows of K/R peers)")
    if rows < 2 or n // rows < 2:
        raise TopologyError(f"topology {name!r}: --rows {rows} on --peers {n} leaves a side under 2 (a 2-D grid "
                            "has at least 2 rows and 2 columns)")
    return rows, n // rows


def _row_major(graph: nx.Graph, cols: int) -> nx.Graph:
    """networkx's grid, node (r, c) renamed r·cols + c."""
    return nx.relabel_nodes(graph, {(r, c): r * cols + c for r, c in graph.nodes})


@register("torus", flags=ROWS)
def torus(n: int, seed: int = 0, rows: int | None = None) -> nx.Graph:
    """R x K/R periodic grid (the product of two cycles): each peer linked to the 4 around it, wrapping around."""
    r, c = sides("torus", n, rows)
    return _row_major(nx.grid_2d_graph(r, c, periodic=True), c)


@register("grid", flags=ROWS)
def grid(n: int, seed: int = 0, rows: int | None = None) -> nx.Graph:
    """R x K/R grid without wrap-around: each peer linked to those left, right, above and below it."""
    r, c = sides("grid", n, rows)
    return _row_major(nx.grid_2d_graph(r, c), c)
