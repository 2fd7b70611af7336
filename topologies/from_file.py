"""The ``file`` topology: an edge list, an adjacency matrix (.npy, or text rows) or GraphML."""
from __future__ import annotations

import re
from pathlib import Path

import networkx as nx
import numpy as np

from topologies.base import TopologyError, register

#: The most characters of a file's text an error message quotes (p2pfl.shown's limit).
QUOTED = 80


def shown(text: str) -> str:
    """`text` as repr() writes it, cut after QUOTED characters with '...': a message stays one short line."""
    quoted = repr(text[:QUOTED + 1])
    return quoted if len(quoted) <= QUOTED else quoted[:QUOTED] + "..."


def _label(raw: object, where: str) -> int:
    """An integer node label; GraphML ids like "n3" are accepted as 3."""
    text = str(raw).strip()
    match = re.fullmatch(r"n?(-?\d+)", text)
    if match is None:
        raise TopologyError(f"graph file: node label {shown(text)} {where} is not an integer")
    return int(match.group(1))


def _from_matrix(a: np.ndarray, path: Path) -> nx.Graph:
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise TopologyError(f"graph file {path}: adjacency matrix must be square, got shape {a.shape}")
    if a.dtype.kind not in "biuf" or not np.isfinite(a).all():
        raise TopologyError(f"graph file {path}: adjacency matrix entries must be finite numbers (no NaN or Inf)")
    if not np.array_equal(a != 0, (a != 0).T):
        raise TopologyError(f"graph file {path}: adjacency matrix is not symmetric")
    g = nx.Graph()
    g.add_nodes_from(range(a.shape[0]))
    g.add_edges_from((int(i), int(j)) for i, j in zip(*np.nonzero(np.triu(a))))
    return g


def _read_text(path: Path) -> nx.Graph:
    """A square numeric table with 3+ columns is an adjacency matrix; otherwise lines are "i j" edges."""
    rows: list[tuple[int, list[str]]] = []
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise TopologyError(f"graph file {path}: not a UTF-8 text edge list or adjacency matrix (nor .npy or "
                            ".graphml by its suffix)") from None
    for lineno, line in enumerate(text.splitlines(), start=1):
        body = line.split("#", 1)[0].strip()
        if body:
            rows.append((lineno, [t for t in re.split(r"[,\s]+", body) if t]))
    width = {len(tokens) for _, tokens in rows}
    if len(width) == 1 and len(rows) >= 3 and width == {len(rows)}:
        try:
            matrix = np.array([[float(t) for t in tokens] for _, tokens in rows])
        except ValueError:
            raise TopologyError(f"graph file {path}: adjacency matrix holds a non-number") from None
        return _from_matrix(matrix, path)
    g = nx.Graph()
    for lineno, tokens in rows:
        if len(tokens) != 2:
            raise TopologyError(f"graph file {path}, line {lineno}: expected 'i j', got {shown(' '.join(tokens))}")
        g.add_edge(*(_label(t, f"on line {lineno}") for t in tokens))
    return g


def read_graph(path: str | Path) -> nx.Graph:
    """Read an undirected graph from ``path`` (.graphml, .npy, or text edge list / adjacency matrix)."""
    path = Path(path)
    if not path.is_file():
        raise TopologyError(f"graph file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".graphml":
        try:
            raw = nx.read_graphml(path)
        except Exception as exc:  # networkx raises several parser errors
            raise TopologyError(f"graph file {path}: not valid GraphML ({exc})") from None
        return nx.relabel_nodes(nx.Graph(raw), {v: _label(v, "in GraphML") for v in raw.nodes})
    if suffix == ".npy":
        try:
            matrix = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise TopologyError(f"graph file {path}: not a readable .npy matrix ({exc})") from None
        return _from_matrix(matrix, path)
    return _read_text(path)


@register("file")
def from_file(n: int, seed: int = 0, path: str | Path | None = None) -> nx.Graph:
    """A user-given graph on peers 0..n-1; peers the file never mentions stay isolated (and fail connectivity)."""
    if path is None:
        raise TopologyError("topology 'file' needs path=<edge list, adjacency matrix or .graphml>")
    g = read_graph(path)
    g.add_nodes_from(range(n))
    return g
