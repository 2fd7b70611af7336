"""Plots of one run, written into ``<run>/plots/``.

Every plot is its own function taking a ``Run`` and an output folder and returning the written path, or
None when the run lacks the data for it (a run in progress, an algorithm without a loss, no partition).
Figures are built on matplotlib's Agg canvas directly (no pyplot state, no display needed), and each file is
replaced atomically: saved under a temporary name in the same folder, then ``os.replace``d.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from p2pfl.records import AVG, SIM_TIME, UNTRAINED
from topologies.plot import draw_node_labels, layout
from topologies.stats import pair_weights, sparse_mixing_of

from .labels import axis_label, metric_title, unit_label
from .metric_panels import BYTES, X_LABELS, MetricPanel, metric_panels, split_metric_name
from .metric_plots import FILES, MANY_PEERS, metrics_figure
from .runs import ROUND, Run, is_number
from .style import (
    AVG_COLOUR,
    PEER_COLOUR,
    REFERENCE_STYLE,
    contrast_text,
    draw_reference,
    draw_zeros,
    grid,
    legend,
    new_figure,
    plot_formats,
    save,
    saved_files,
    styled,
)

log = logging.getLogger(__name__)

__all__ = [
    "plot_run",
    "plot_metrics",
    "plot_metrics_time",
    "plot_metrics_bytes",
    "X_LABELS",
    "metric_panels",
    "metrics_figure",
    "split_metric_name",
    "MetricPanel",
    "plot_consensus",
    "plot_topology",
    "plot_partition",
    "plot_per_peer",
    "plot_per_peer_degree",
    "consensus_shares",
    "second_eigenvalue",
]


# ----- helpers ------------------------------------------------------------------------------------------------
def second_eigenvalue(run: Run) -> float | None:
    """|lambda2(W)| as the manifest records it (topologies.stats), or None before the manifest is written."""
    return run.topology["stats"]["lambda2"] if run.topology else None


def consensus_shares(run: Run) -> np.ndarray | None:
    """Each peer's share of the consensus (the left Perron vector of W) as the manifest records it."""
    return np.asarray(run.topology["stats"]["consensus_share"]) if run.topology else None


# ----- the plots --------------------------------------------------------------------------------------------------
def _plot_metrics_against(x: str) -> Callable[[Run, Path], Path | None]:
    """The plot of the run's metric figure against ``x`` (analysis.metric_plots), into FILES[x]."""
    def plot(run: Run, out_dir: Path) -> Path | None:
        fig = metrics_figure(run, x)
        return None if fig is None else save(fig, out_dir / FILES[x])
    plot.__name__ = f"plot_{FILES[x].removesuffix('.png')}"
    plot.__doc__ = f"{FILES[x]}: the metric panels against {X_LABELS[x]} (None where the run lacks that x)."
    return plot


#: metrics.png: every metric against round; metrics_time.png: against simulated time (runs with the clock);
#: metrics_bytes.png: against the cumulative bytes one peer sent (runs that sent any).
plot_metrics = _plot_metrics_against(ROUND)
plot_metrics_time = _plot_metrics_against(SIM_TIME)
plot_metrics_bytes = _plot_metrics_against(BYTES)


@styled
def plot_consensus(run: Run, out_dir: Path) -> Path | None:
    """consensus.png: consensus distance against round (log scale) with the spectral prediction of the graphs
    actually used, c·Π σ2(W_t)² from the first positive value c (σ2 = ‖W_t − J‖₂ over the alive peers, from
    the round records); for runs without it, c0·lambda2^(2t) of the static W. Rounds at exact consensus (0,
    which a log axis cannot show) are marked on the bottom edge (style.draw_zeros).

    The consensus distance is a mean of squared norms, so pure gossip shrinks it by at least σ2² a round under
    a doubly stochastic W; local training between rounds pushes the measured curve above the prediction. Under a
    row-stochastic W that is not doubly stochastic (EL-Local) σ2 can exceed 1: a product that rises bounds
    nothing and is not drawn (the legend says so). The prediction is drawn over the measured rounds only, and the
    y axis is the measured values' range (×/÷ 2): a prediction falling far below them does not stretch it.
    """
    xs, ys = run.series("consensus_distance")
    zeros = [x for x, y in zip(xs, ys) if y == 0]
    pts = [(x, y) for x, y in zip(xs, ys) if y > 0]
    if not pts and not zeros:
        return None
    fig = new_figure(8, 4)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_yscale("log")
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    if pts:
        ax.plot(xs, ys, marker="o" if len(xs) <= 30 else None, markersize=3, label="measured")
    draw_zeros(ax, zeros, AVG_COLOUR)
    predicted = run.spectral_prediction()
    lam = second_eigenvalue(run)
    measured = xs + zeros
    if predicted is not None and measured and Run.prediction_rises(predicted):
        # a row-stochastic, not doubly stochastic W (EL-Local): σ2 > 1, the product rises and bounds nothing
        ax.plot([], [], linestyle="none", label="no gossip-alone prediction: σ2(W) > 1, it would rise")
    elif predicted is not None and measured:
        keep = [(x, y) for x, y in zip(*predicted) if y > 0 and min(measured) <= x <= max(measured)]
        if len(keep) >= 2:  # over the measured rounds only, and not widening the y axis (an artist, clipped)
            ax.add_artist(Line2D(*zip(*keep), label="gossip alone: c·Π σ2(W_t)², the graphs used",
                                 **REFERENCE_STYLE))
    elif pts and lam is not None and 0 < lam < 1:
        t = np.linspace(xs[0], xs[-1], max(2, len(xs) * 4))
        pred = ys[0] * lam ** (2.0 * (t - xs[0]))
        keep = pred > 0
        if keep.sum() >= 2:
            ax.add_artist(Line2D(t[keep], pred[keep], label=f"c0·λ2^(2t), |λ2| = {lam:.3f}", **REFERENCE_STYLE))
    if pts:  # the measured values' range, a little wider: the prediction (no data limit) never stretches it
        ax.set_ylim(min(ys) / 2.0, max(ys) * 2.0)
    if not pts:  # every value exactly 0: a log axis without data has no range of its own
        ax.set_ylim(1e-12, 1.0)
    every = xs + zeros
    pad = 0.04 * ((max(every) - min(every)) or 1.0)
    ax.set_xlim(min(every) - pad, max(every) + pad)  # the zeros' marks do not extend the data limits
    ax.set_xlabel("round")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(axis_label("consensus_distance"))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)  # off the data
    ax.set_title(run.title, fontsize=9)
    fig.tight_layout()
    return save(fig, out_dir / "consensus.png")


#: Points are labelled only when no two of them fall in the same cell of a LABEL_GRID x LABEL_GRID grid over the
#: panel's data range (closer, their labels overlap into one smudge).
LABEL_GRID = 25
MAX_LABELLED_POINTS = 40


def apart(xs: list[float], ys: list[float]) -> bool:
    """Whether labels beside these points can be read: few enough points, none sharing a grid cell."""
    if not xs or len(xs) > MAX_LABELLED_POINTS:
        return False

    def cells(values: list[float]) -> list[int]:
        low, span = min(values), (max(values) - min(values)) or 1.0
        return [int((v - low) / span * LABEL_GRID) for v in values]

    return len(set(zip(cells(xs), cells(ys)))) == len(xs)


@styled
def plot_per_peer_degree(run: Run, out_dir: Path) -> Path | None:
    """per_peer_degree.png: each peer's final value of every numeric per-peer metric against its in-degree,
    averaged over the rounds it took part in (crashed peers have no final value); not drawn for a regular graph
    (one degree: a column of points), peers named only where their points lie apart (``apart``)."""
    per_peer, degree = run.final_per_peer(), run.mean_degree()
    if not per_peer or not degree or len(set(degree.values())) < 2:
        return None  # a regular graph: every peer at one degree, nothing to see against it
    names = sorted({k for m in per_peer.values() for k, v in m.items() if is_number(v)})
    if not names:
        return None
    rows, cols = grid(len(names))
    fig = new_figure(4.2 * cols, 3.4 * rows)
    for i, name in enumerate(names):
        ax = fig.add_subplot(rows, cols, i + 1)
        peers = [p for p in per_peer if p in degree and is_number(per_peer[p].get(name))]
        xs = [degree[p] for p in peers]
        ys = [float(per_peer[p][name]) for p in peers]
        many = len(peers) > MANY_PEERS
        ax.scatter(xs, ys, s=2 if many else 18, color=AVG_COLOUR, rasterized=many, linewidths=0 if many else None)
        if apart(xs, ys):
            for p, x, y in zip(peers, xs, ys):
                ax.annotate(p, (x, y), fontsize=6, xytext=(2, 2), textcoords="offset points")
        if all(float(x).is_integer() for x in xs):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(metric_title(name))
        ax.set_xlabel("mean in-degree over the rounds taken part in")
        ax.set_ylabel(unit_label(name))
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"{run.title}: final per-peer metrics against degree", fontsize=9)
    fig.tight_layout()
    return save(fig, out_dir / "per_peer_degree.png")


@styled
def plot_topology(run: Run, out_dir: Path) -> Path | None:
    """topology.png: the peer graph, edge width and label W_ij, node colour the peer's consensus share."""
    import networkx as nx

    topo = run.topology
    if topo is None:
        return None
    if topo["stats"]["n_nodes"] > MANY_PEERS:
        return _topology_histograms(run, out_dir)
    w = sparse_mixing_of(topo)
    graph = nx.Graph()
    graph.add_nodes_from(range(w.shape[0]))
    graph.add_edges_from((i, j) for i, j in topo["edges"])

    pos = layout(graph)
    edge_list = list(graph.edges())
    uv, vu = (a.tolist() for a in pair_weights(w, edge_list))
    labels = {(i, j): f"{a:.3g}" if abs(a - b) < 1e-9 else f"{a:.3g}/{b:.3g}"
              for (i, j), a, b in zip(edge_list, uv, vu)}
    weights = [(a + b) / 2 for a, b in zip(uv, vu)]
    top = max(weights) if weights and max(weights) > 0 else 1.0
    widths = [0.5 + 5.0 * wt / top for wt in weights]

    n = graph.number_of_nodes()
    size = min(12.0, 5.0 + n / 8)
    fig = new_figure(size + 1.2, size)
    ax = fig.add_subplot(1, 1, 1)
    nx.draw_networkx_edges(graph, pos, ax=ax, edgelist=edge_list, width=widths, edge_color="0.5")
    shares = consensus_shares(run)
    nodes = nx.draw_networkx_nodes(graph, pos, ax=ax, nodelist=list(range(n)), node_color=shares, cmap="viridis",
                                   vmin=0.0, vmax=float(max(shares.max(), 1e-12)), node_size=max(60, 500 - 4 * n))
    fig.colorbar(nodes, ax=ax, label="consensus share", shrink=0.8)
    if n <= 60:
        draw_node_labels(ax, pos, nodes.to_rgba(nodes.get_array()))
    if labels and len(edge_list) <= 60:
        nx.draw_networkx_edge_labels(graph, pos, ax=ax, edge_labels=labels, font_size=7)
    title = f"{run.title}\n{gap_words(topo)}"
    if any("/" in text for text in labels.values()):
        title += "\nedge labels W_ij/W_ji for i < j"
    ax.set_title(title)
    ax.set_axis_off()
    fig.tight_layout()
    return save(fig, out_dir / "topology.png")


def gap_words(topo: dict) -> str:
    """The spectral gap a topology figure names: that of the W it draws and, for a network that changes (its
    `stats["mixing"]` over more than one W), also 1 − |λ2(E[W])| over the run's rounds, the study report's measure."""
    drawn = f"spectral gap {topo['stats']['spectral_gap']:.3f}"
    mixing = topo["stats"].get("mixing")
    if not mixing or mixing.get("rounds", 1) <= 1:
        return drawn
    return f"{drawn} (W drawn); over the run's rounds 1 − |λ2(E[W])| {mixing['spectral_gap']:.3f}"


@styled
def _topology_histograms(run: Run, out_dir: Path) -> Path | None:
    """topology.png of a large graph: histograms of the peers' degrees (from the edges) and consensus shares,
    in time linear in the edges and peers (no layout, no drawing of K nodes)."""
    topo = run.topology
    assert topo is not None
    n = int(topo["stats"]["n_nodes"])
    edges = np.asarray(topo["edges"], dtype=np.int64).reshape(-1)
    degree = np.bincount(edges, minlength=n)
    shares = consensus_shares(run)
    fig = new_figure(10, 4)
    ax = fig.add_subplot(1, 2, 1)
    ax.hist(degree, bins=np.arange(degree.min(), degree.max() + 2) - 0.5 if degree.max() - degree.min() < 60 else 40,
            color=AVG_COLOUR)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # a regular graph: one bar at its degree, not 1.9..2.1
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("degree")
    ax.set_ylabel("peers")
    ax.set_title(f"degree: mean {degree.mean():.3g}, min {degree.min()}, max {degree.max()}", fontsize=9)
    ax = fig.add_subplot(1, 2, 2)
    even = float(np.ptp(shares)) <= 1e-9 / n  # a doubly stochastic W: every share 1/K up to rounding
    ax.hist(shares, bins=41 if even else 40, color=PEER_COLOUR, range=(0.5 / n, 1.5 / n) if even else None)
    ax.set_xlabel("consensus share")
    ax.set_title(f"consensus share: {'all' if even else 'max'} {shares.max():.3g} (uniform {1 / n:.3g})",
                 fontsize=9)
    fig.suptitle(f"{run.title} ({gap_words(topo)}); graph not "
                 f"drawn above {MANY_PEERS} peers", fontsize=9)
    fig.tight_layout()
    return save(fig, out_dir / "topology.png")


@styled
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
    fig = new_figure(min(14.0, 3.0 + 0.45 * classes), min(14.0, 2.0 + 0.35 * peers))
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(c, aspect="auto", cmap="Blues", interpolation="nearest")
    fig.colorbar(image, ax=ax, label="samples")
    ax.set_xlabel("class")
    ax.set_ylabel("peer")
    if peers * classes <= 400:
        for i in range(peers):
            for j in range(classes):
                ax.text(j, i, f"{int(c[i, j])}", ha="center", va="center", fontsize=6,
                        color=contrast_text(image.cmap(image.norm(c[i, j]))))
    if classes <= 40:
        ax.set_xticks(range(classes))
    if peers <= 40:
        ax.set_yticks(range(peers))
    ax.grid(False)
    ax.set_title(f"{run.title}: samples per peer and class", fontsize=9)
    fig.tight_layout()
    return save(fig, out_dir / "partition.png")


def _draw_final_lines(ax, run: Run, name: str) -> None:
    """The network average's final ``<name>_avg`` (solid) and the untrained model's ``<name>_untrained`` (dashed
    reference) across a panel of per-peer values, where the final evaluation records them."""
    final = run.final_metrics()
    if is_number(final.get(name + AVG)):
        ax.axhline(final[name + AVG], color=AVG_COLOUR, label=f"network average {final[name + AVG]:.4g}")
    if is_number(final.get(name + UNTRAINED)):
        draw_reference(ax, final[name + UNTRAINED], "untrained model")


@styled
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
    spec = {str(s["peer"]): s for s in (run.peers_spec or [])}
    rows, cols = grid(len(names))
    width = max(4.2, min(12.0, 1.5 + 0.3 * len(peers)))
    fig = new_figure(width * cols, 4.1 * rows)
    for i, name in enumerate(names):
        ax = fig.add_subplot(rows, cols, i + 1)
        values = [per_peer[p].get(name) for p in peers]
        ys = [float(v) if is_number(v) else np.nan for v in values]
        if len(peers) > MANY_PEERS:  # K bars are K patches: one line of small markers instead
            ax.plot(range(len(peers)), ys, linestyle="none", marker=".", markersize=2, color=PEER_COLOUR,
                    rasterized=True)
        else:
            ax.bar(range(len(peers)), ys, color=PEER_COLOUR, alpha=0.7)
        finite = [y for y in ys if np.isfinite(y)]
        if finite:
            ax.axhline(float(np.mean(finite)), color="0.15", linewidth=1.2, label=f"peers: mean {np.mean(finite):.4g}")
        _draw_final_lines(ax, run, name)
        legend(ax, loc="upper center", bbox_to_anchor=(0.5, -0.18))  # under the bars, which fill the panel
        ax.set_title(metric_title(name))
        ax.set_ylabel(unit_label(name))
        ax.set_xlabel("peer")
        if len(peers) <= 40:
            ax.set_xticks(range(len(peers)))
            ax.set_xticklabels([p if p not in spec else f"{p}\n{spec[p]['task']}" for p in peers],
                               fontsize=7)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"{run.title}: round {run.final_eval()['round']}", fontsize=9)
    fig.tight_layout()
    return save(fig, out_dir / "per_peer.png")


PLOTS: list[Callable[[Run, Path], Path | None]] = [
    plot_metrics, plot_metrics_time, plot_metrics_bytes, plot_consensus, plot_topology, plot_partition, plot_per_peer,
    plot_per_peer_degree,
]


def plot_run(run: Run | str | os.PathLike, out_dir: str | os.PathLike | None = None,
             formats: str | Sequence[str] | None = None) -> list[Path]:
    """Make every plot the run has data for, into ``out_dir`` (default ``<run>/plots``), in ``formats`` (default:
    the run's --plot-format, else PNG); return the files written.

    A plot whose data is missing is skipped; a run still in progress gets the plots of what it has so far.
    """
    from .runs import load_run

    if not isinstance(run, Run):
        run = load_run(run)
    target = Path(out_dir) if out_dir is not None else run.path / "plots"
    written: list[Path] = []
    with plot_formats(formats or run.config.get("plot_format") or "png"):
        for plot in PLOTS:
            path = plot(run, target)
            if path is not None:
                written += saved_files(path)
    if run.summarised and run.final_per_peer() is None:
        log.warning("analysis: %s: per_peer.png and per_peer_degree.png not drawn: the records summarise the peers "
                    "(more than --peer-records); metrics.png draws their min..max", run.name)
    return written
