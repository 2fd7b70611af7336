"""Draw a topology with its mixing weights to a PNG (Agg canvas, no display needed)."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

from topologies.measures import Matrix
from topologies.stats import pair_weights, statistics

MAX_LABELLED_EDGES = 60
#: The luminance at which black and white text contrast equally with a background (WCAG: (L + 0.05) / 0.05 =
#: 1.05 / (L + 0.05)); above it black reads better, below it white.
EQUAL_CONTRAST = math.sqrt(1.05 * 0.05) - 0.05


def luminance(colour: Any) -> float:
    """WCAG relative luminance of a colour (any matplotlib colour; alpha ignored): 0 black .. 1 white."""
    channels = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in to_rgb(colour)]
    return 0.2126 * channels[0] + 0.7152 * channels[1] + 0.0722 * channels[2]


def contrast_text(background: Any) -> str:
    """"black" or "white", whichever contrasts more with a cell or node of colour ``background`` (RGBA from a
    colormap included): the text of annotated heat maps and node labels."""
    return "black" if luminance(background) > EQUAL_CONTRAST else "white"


def draw_node_labels(ax: Axes, pos: Mapping[int, Any], colours: Sequence[Any], font_size: float = 8) -> None:
    """Each node's id at its position, in the text colour that reads on its fill (``colours`` in node order,
    sorted ids)."""
    for node, fill in zip(sorted(pos), colours):
        x, y = pos[node]
        ax.text(x, y, str(node), ha="center", va="center", fontsize=font_size, color=contrast_text(fill),
                zorder=3)


def layout(graph: nx.Graph, seed: int = 0) -> dict[int, np.ndarray]:
    """Node positions: a circle for cycle-like graphs (all degrees 2), else a seeded spring layout."""
    if all(d == 2 for _, d in graph.degree) or graph.graph.get("topology") == "complete":
        return nx.circular_layout(sorted(graph.nodes))
    return nx.spring_layout(graph, seed=seed)


def draw(graph: nx.Graph, w: Matrix, path: str | Path, title: str | None = None) -> Path:
    """Write a PNG of ``graph``: edge widths and labels from W ("W_uv|W_vu" for u < v when W is not symmetric),
    node colour from the consensus share."""
    stats = statistics(graph, w)
    pos = layout(graph)
    edges = sorted(graph.edges)
    uv, vu = pair_weights(w, edges)
    strength = (uv + vu) / 2
    fig = Figure(figsize=(7, 7))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.set_aspect("equal")
    nx.draw_networkx_edges(graph, pos, edgelist=edges, width=0.5 + 6 * strength / strength.max(), ax=ax,
                           edge_color="0.5")
    nodes = nx.draw_networkx_nodes(graph, pos, nodelist=sorted(graph.nodes), node_color=stats["consensus_share"],
                                   cmap="YlOrRd", vmin=0.0, vmax=stats["max_share"],
                                   node_size=300, edgecolors="0.3", ax=ax)
    draw_node_labels(ax, pos, nodes.to_rgba(nodes.get_array()))
    if len(edges) <= MAX_LABELLED_EDGES:
        labels = {(u, v): f"{a:.2f}" if np.isclose(a, b) else f"{a:.2f}|{b:.2f}"
                  for (u, v), a, b in zip(edges, uv.tolist(), vu.tolist())}
        nx.draw_networkx_edge_labels(graph, pos, edge_labels=labels, font_size=6, ax=ax)
    fig.colorbar(nodes, ax=ax, shrink=0.6, label="consensus share")
    name = title or f"{graph.graph.get('topology', 'graph')} K={stats['n_nodes']}"
    ax.set_title(f"{name}: |λ2|={stats['lambda2']:.3f}, gap={stats['spectral_gap']:.3f}, "
                 f"diameter={stats['diameter']}")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    return out
