"""Plots of one run, written into ``<run>/plots/``.

Every plot is its own function taking a ``Run`` and an output folder and returning the written path, or
None when the run lacks the data for it (a run in progress, an algorithm without a loss, no partition).
Figures are built on matplotlib's Agg canvas directly (no pyplot state, no display needed), and each file is
replaced atomically: saved under a temporary name in the same folder, then ``os.replace``d.
"""
from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from p2pfl.runtime.files import write_atomic

from .runs import Run, is_number

__all__ = [
    "plot_run",
    "plot_metrics",
    "plot_consensus",
    "plot_topology",
    "plot_partition",
    "plot_per_peer",
    "consensus_shares",
    "second_eigenvalue",
]


# ----- helpers ------------------------------------------------------------------------------------------------
def _new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path) -> Path:
    """Save ``fig`` as PNG to ``path`` atomically."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    write_atomic(path, buf.getvalue())
    return path


def _grid(n: int) -> tuple[int, int]:
    cols = min(n, 3)
    return math.ceil(n / cols), cols


def _mixing(run: Run) -> np.ndarray | None:
    mixing = run.topology.get("mixing")
    if not isinstance(mixing, list) or not mixing:
        return None
    try:
        w = np.asarray(mixing, dtype=float)
    except (TypeError, ValueError):
        return None
    return w if w.ndim == 2 and w.shape[0] == w.shape[1] else None


def second_eigenvalue(run: Run) -> float | None:
    """|lambda2(W)|: from the topology stats (``lambda2`` or ``1 - spectral_gap``), else from the mixing matrix."""
    stats = run.topology.get("stats")
    if isinstance(stats, Mapping):
        for key in ("lambda2", "lambda_2", "abs_lambda2", "slem"):
            if is_number(stats.get(key)):
                return abs(float(stats[key]))
        if is_number(stats.get("spectral_gap")):
            return 1.0 - float(stats["spectral_gap"])
    w = _mixing(run)
    if w is None or w.shape[0] < 2:
        return None
    mags = np.sort(np.abs(np.linalg.eigvals(w)))[::-1]
    return float(mags[1])


def consensus_shares(run: Run) -> np.ndarray | None:
    """Each peer's share of the consensus: the stats' record, else the left Perron vector of W (sums to 1)."""
    stats = run.topology.get("stats")
    if isinstance(stats, Mapping):
        for key in ("consensus_share", "consensus_shares", "perron", "perron_vector", "share"):
            value = stats.get(key)
            if isinstance(value, Mapping):
                value = [value[k] for k in sorted(value, key=lambda k: int(k))]
            if isinstance(value, list) and value and all(is_number(v) for v in value):
                return np.asarray(value, dtype=float)
    w = _mixing(run)
    if w is None:
        return None
    vals, vecs = np.linalg.eig(w.T)
    pi = np.real(vecs[:, np.argmin(np.abs(vals - 1.0))])
    total = pi.sum()
    if total == 0 or not np.isfinite(total):
        return None
    return pi / total


# ----- the plots --------------------------------------------------------------------------------------------------
def plot_metrics(run: Run, out_dir: Path) -> Path | None:
    """metrics.png: every numeric eval metric against round, and the mean training loss against round."""
    names: list[str] = []
    for record in run.evals:
        for key, value in (record.get("metrics") or {}).items():
            if is_number(value) and key not in names:
                names.append(key)
    panels: list[tuple[str, list[float], list[float]]] = []
    for name in names:
        xs, ys = run.series(name, source="evals")
        if xs:
            panels.append((name, xs, ys))
    xs, ys = run.series("loss_mean")
    if not xs:  # derive it from the per-peer losses when only those are logged
        for record in run.rounds:
            losses = [v for v in (record.get("loss") or {}).values() if is_number(v)]
            if losses and is_number(record.get("round")):
                xs.append(float(record["round"]))
                ys.append(float(np.mean(losses)))
    if xs:
        panels.append(("loss_mean (train)", xs, ys))
    if not panels:
        return None
    rows, cols = _grid(len(panels))
    fig = _new_figure(4.2 * cols, 3.2 * rows)
    for i, (name, xs, ys) in enumerate(panels):
        ax = fig.add_subplot(rows, cols, i + 1)
        ax.plot(xs, ys, marker="o" if len(xs) <= 30 else None, markersize=3)
        ax.set_title(name)
        ax.set_xlabel("round")
        ax.grid(True, alpha=0.3)
    fig.suptitle(run.name, fontsize=9)
    fig.tight_layout()
    return _save(fig, out_dir / "metrics.png")


def plot_consensus(run: Run, out_dir: Path) -> Path | None:
    """consensus.png: consensus distance against round (log scale) with the gossip prediction c0·lambda2^(2t).

    The consensus distance is a mean of squared norms, so pure gossip shrinks it by lambda2² a round; the
    line starts at the first recorded value. Local training between rounds pushes the measured curve above it.
    """
    xs, ys = run.series("consensus_distance")
    pts = [(x, y) for x, y in zip(xs, ys) if y > 0]
    if not pts:
        return None
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    fig = _new_figure(6, 4)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(xs, ys, marker="o" if len(xs) <= 30 else None, markersize=3, label="measured")
    lam = second_eigenvalue(run)
    if lam is not None and 0 < lam < 1:
        t = np.linspace(xs[0], xs[-1], max(2, len(xs) * 4))
        pred = ys[0] * lam ** (2.0 * (t - xs[0]))
        keep = pred > 0
        if keep.sum() >= 2:
            ax.plot(t[keep], pred[keep], "--", label=f"c0·λ2^(2t), |λ2| = {lam:.3f}")
    ax.set_yscale("log")
    ax.set_xlabel("round")
    ax.set_ylabel("consensus distance")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(run.name, fontsize=9)
    fig.tight_layout()
    return _save(fig, out_dir / "consensus.png")


def plot_topology(run: Run, out_dir: Path) -> Path | None:
    """topology.png: the peer graph, edge width and label W_ij, node colour the peer's consensus share."""
    import networkx as nx

    topo = run.topology
    edges = topo.get("edges")
    w = _mixing(run)
    if not isinstance(edges, list) and w is None:
        return None
    graph = nx.Graph()
    k = w.shape[0] if w is not None else (run.num_peers or 0)
    graph.add_nodes_from(range(k))
    if isinstance(edges, list):
        for edge in edges:
            if isinstance(edge, (list, tuple)) and len(edge) >= 2:
                i, j = int(edge[0]), int(edge[1])
                if i != j:
                    graph.add_edge(i, j)
    elif w is not None:
        rows, cols = np.nonzero(w)
        graph.add_edges_from((int(i), int(j)) for i, j in zip(rows, cols) if i < j)
    if graph.number_of_nodes() == 0:
        return None

    degrees = [d for _, d in graph.degree()]
    if graph.number_of_nodes() > 2 and nx.is_connected(graph) and all(d == 2 for d in degrees):
        pos = nx.circular_layout(graph)
    else:
        pos = nx.spring_layout(graph, seed=0)

    edge_list = list(graph.edges())
    weights: list[float] = []
    labels: dict[tuple[int, int], str] = {}
    for i, j in edge_list:
        if w is not None and max(i, j) < w.shape[0]:
            wij, wji = float(w[i, j]), float(w[j, i])
            weights.append((wij + wji) / 2)
            labels[(i, j)] = f"{wij:.3g}" if abs(wij - wji) < 1e-9 else f"{wij:.3g}/{wji:.3g}"
        else:
            weights.append(1.0)
    top = max(weights) if weights and max(weights) > 0 else 1.0
    widths = [0.5 + 5.0 * wt / top for wt in weights]

    n = graph.number_of_nodes()
    size = min(12.0, 5.0 + n / 8)
    fig = _new_figure(size + 1.2, size)
    ax = fig.add_subplot(1, 1, 1)
    nx.draw_networkx_edges(graph, pos, ax=ax, edgelist=edge_list, width=widths, edge_color="0.5")
    shares = consensus_shares(run)
    node_size = max(60, 500 - 4 * n)
    if shares is not None and len(shares) == n:
        nodes = nx.draw_networkx_nodes(graph, pos, ax=ax, nodelist=list(range(n)), node_color=shares,
                                       cmap="viridis", vmin=0.0, vmax=float(max(shares.max(), 1e-12)),
                                       node_size=node_size)
        fig.colorbar(nodes, ax=ax, label="consensus share", shrink=0.8)
    else:
        nx.draw_networkx_nodes(graph, pos, ax=ax, node_color="tab:blue", node_size=node_size)
    if n <= 60:
        nx.draw_networkx_labels(graph, pos, ax=ax, font_size=8, font_color="white")
    if labels and len(edge_list) <= 60:
        nx.draw_networkx_edge_labels(graph, pos, ax=ax, edge_labels=labels, font_size=7)
    title = run.topology_name or "topology"
    lam = second_eigenvalue(run)
    if lam is not None:
        title += f"  (spectral gap {1 - lam:.3f})"
    if any("/" in text for text in labels.values()):
        title += "\nedge labels W_ij/W_ji for i < j"
    ax.set_title(title)
    ax.set_axis_off()
    fig.tight_layout()
    return _save(fig, out_dir / "topology.png")


def plot_partition(run: Run, out_dir: Path) -> Path | None:
    """partition.png: the peers x classes sample counts of the data partition as a heat map."""
    counts = run.class_counts
    if counts is None:
        return None
    try:
        c = np.asarray(counts, dtype=float)
    except (TypeError, ValueError):
        return None
    if c.ndim != 2 or c.size == 0:
        return None
    peers, classes = c.shape
    fig = _new_figure(min(14.0, 3.0 + 0.45 * classes), min(14.0, 2.0 + 0.35 * peers))
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(c, aspect="auto", cmap="Blues", interpolation="nearest")
    fig.colorbar(image, ax=ax, label="samples")
    ax.set_xlabel("class")
    ax.set_ylabel("peer")
    if peers * classes <= 400:
        threshold = c.max() / 2 if c.max() > 0 else 1
        for i in range(peers):
            for j in range(classes):
                ax.text(j, i, f"{int(c[i, j])}", ha="center", va="center", fontsize=6,
                        color="white" if c[i, j] > threshold else "black")
    if classes <= 40:
        ax.set_xticks(range(classes))
    if peers <= 40:
        ax.set_yticks(range(peers))
    ax.set_title(f"partition: {run.partition_label or '?'}", fontsize=9)
    fig.tight_layout()
    return _save(fig, out_dir / "partition.png")


def plot_per_peer(run: Run, out_dir: Path) -> Path | None:
    """per_peer.png: each peer's final value of every numeric metric of the last per-peer evaluation."""
    per_peer = run.final_per_peer()
    if not per_peer:
        return None

    def order(key: str) -> tuple[int, str]:
        return (int(key), "") if key.lstrip("-").isdigit() else (1 << 30, key)

    peers = sorted(per_peer, key=order)
    names: list[str] = []
    for peer in peers:
        for key, value in per_peer[peer].items():
            if is_number(value) and key not in names:
                names.append(key)
    if not names:
        return None
    spec = {str(s.get("peer")): s for s in (run.peers_spec or [])}
    rows, cols = _grid(len(names))
    width = max(4.2, min(12.0, 1.5 + 0.3 * len(peers)))
    fig = _new_figure(width * cols, 3.4 * rows)
    for i, name in enumerate(names):
        ax = fig.add_subplot(rows, cols, i + 1)
        values = [per_peer[p].get(name) for p in peers]
        ys = [float(v) if is_number(v) else np.nan for v in values]
        ax.bar(range(len(peers)), ys, color="tab:blue")
        finite = [y for y in ys if np.isfinite(y)]
        if finite:
            ax.axhline(float(np.mean(finite)), color="tab:red", linestyle="--", linewidth=1,
                       label=f"mean {np.mean(finite):.4g}")
            ax.legend(fontsize=7)
        ax.set_title(name)
        ax.set_xlabel("peer")
        if len(peers) <= 40:
            ax.set_xticks(range(len(peers)))
            ax.set_xticklabels([p if p not in spec else f"{p}\n{spec[p].get('task', '')}" for p in peers],
                               fontsize=7)
        ax.grid(True, axis="y", alpha=0.3)
    last = run.final_eval()
    fig.suptitle(f"{run.name}: round {last.get('round') if last else '?'}", fontsize=9)
    fig.tight_layout()
    return _save(fig, out_dir / "per_peer.png")


PLOTS: list[Callable[[Run, Path], Path | None]] = [
    plot_metrics, plot_consensus, plot_topology, plot_partition, plot_per_peer,
]


def plot_run(run: Run | str | os.PathLike, out_dir: str | os.PathLike | None = None) -> list[Path]:
    """Make every plot the run has data for, into ``out_dir`` (default ``<run>/plots``); return the files written.

    A plot whose data is missing is skipped; a run still in progress gets the plots of what it has so far.
    """
    from .runs import load_run

    if not isinstance(run, Run):
        run = load_run(run)
    target = Path(out_dir) if out_dir is not None else run.path / "plots"
    written: list[Path] = []
    for plot in PLOTS:
        path = plot(run, target)
        if path is not None:
            written.append(path)
    return written
