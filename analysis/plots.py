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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from p2pfl.records import AVG, LOSS, MEAN, PEER_MAX, PEER_MEAN, PEER_MIN, SIM_TIME
from p2pfl.runtime.files import write_atomic
from topologies.plot import layout
from topologies.stats import pair_weights, sparse_mixing_of

from .runs import ROUND, Run, is_number

__all__ = [
    "plot_run",
    "plot_metrics",
    "plot_metrics_time",
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


def second_eigenvalue(run: Run) -> float | None:
    """|lambda2(W)| as the manifest records it (topologies.stats), or None before the manifest is written."""
    return run.topology["stats"]["lambda2"] if run.topology else None


def consensus_shares(run: Run) -> np.ndarray | None:
    """Each peer's share of the consensus (the left Perron vector of W) as the manifest records it."""
    return np.asarray(run.topology["stats"]["consensus_share"]) if run.topology else None


# ----- the metrics plot ------------------------------------------------------------------------------------------
# Eval metric names: ``<name>_avg`` (the network-average model), ``<name>_peer_mean|_peer_min|_peer_max``
# (statistics over the peers) share one panel per ``<name>``; any other name is plotted on its own.
_ROLE_SUFFIXES = ((PEER_MEAN, "peer_mean"), (PEER_MIN, "peer_min"), (PEER_MAX, "peer_max"), (AVG, "avg"))
LOSS_PANEL_TITLE = f"{LOSS + MEAN} (train)"
#: The axis label of each x a metric is drawn against.
X_LABELS = {ROUND: "round", SIM_TIME: "simulated time (s)"}
_AVG_COLOR, _PEER_COLOR, _VALUE_COLOR = "tab:blue", "tab:orange", "tab:blue"

Series = tuple[list[float], list[float]]
#: Above this many peers the graph is not drawn (a spring layout and K nodes cost tens of seconds at 2,000) but
#: summarised as histograms, and the per-peer plots draw small rasterised markers instead of bars and labels.
MANY_PEERS = 300


@dataclass
class MetricPanel:
    """One panel of metrics.png: a title and its series by role.

    Roles: ``avg``, ``peer_mean``, ``peer_min``, ``peer_max`` for a grouped ``<name>``; ``value`` for a plain
    eval metric or the training loss. Each series is (xs, values) with NaNs dropped.
    """

    title: str
    series: dict[str, Series] = field(default_factory=dict)


def split_metric_name(name: str) -> tuple[str, str]:
    """(base, role) of an eval metric name: ``probe_acc_peer_min`` -> (``probe_acc``, ``peer_min``);
    a name without one of the suffixes (or with nothing before it) is (name, ``value``)."""
    for suffix, role in _ROLE_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], role
    return name, "value"


def metric_panels(run: Run, x: str = ROUND) -> list[MetricPanel]:
    """The panels of metrics.png, in order of first appearance in the eval records, then the training loss;
    against the records' ``x`` (the round, or ``sim_time_s``).

    Every ``<name>_avg`` / ``<name>_peer_{mean,min,max}`` metric of one ``<name>`` goes into one panel; a
    plain name gets its own panel (also when it equals some group's ``<name>``). Empty series are left out.
    """
    panels: dict[tuple[str, str], MetricPanel] = {}
    seen: set[str] = set()
    for record in run.evals:
        for key, value in record["metrics"].items():
            if not is_number(value) or key in seen:
                continue
            seen.add(key)
            xs, ys = run.series(key, source="evals", x=x)
            if not xs:
                continue
            base, role = split_metric_name(str(key))
            slot = ("plain", base) if role == "value" else ("group", base)
            panels.setdefault(slot, MetricPanel(title=base)).series[role] = (xs, ys)
    result = list(panels.values())
    xs, ys = run.series(LOSS + MEAN, x=x)
    if xs:
        result.append(MetricPanel(title=LOSS_PANEL_TITLE, series={"value": (xs, ys), **_loss_band(run, x)}))
    return result


def _loss_band(run: Run, x: str) -> dict[str, Series]:
    """The training loss's min..max over peers, for a summarised run (whose per-peer plots are not drawn),
    against round; {} otherwise."""
    if not run.summarised or x != ROUND:
        return {}
    xs, lo, hi = run.peer_band(LOSS)
    return {"peer_min": (xs, lo), "peer_max": (xs, hi)} if xs else {}


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def _draw_band(ax, series: Mapping[str, Series]) -> None:
    """The peers' min..max: a shaded band, or an error bar where only one round has both."""
    lo = dict(zip(*series["peer_min"]))
    hi = dict(zip(*series["peer_max"]))
    xs = sorted(set(lo) & set(hi))
    if not xs:
        return
    label = f"peer min..max ({_fmt(lo[xs[-1]])}..{_fmt(hi[xs[-1]])})"
    if len(xs) >= 2:
        ax.fill_between(xs, [lo[x] for x in xs], [hi[x] for x in xs], color=_PEER_COLOR, alpha=0.2,
                        linewidth=0, label=label)
        return
    x = xs[0]
    mean = dict(zip(*series.get("peer_mean", ([], []))))
    mid = mean.get(x, (lo[x] + hi[x]) / 2)
    ax.errorbar([x], [mid], yerr=[[max(mid - lo[x], 0.0)], [max(hi[x] - mid, 0.0)]], fmt="none",
                ecolor=_PEER_COLOR, elinewidth=1.5, capsize=5, label=label)


def _draw_panel(ax, panel: MetricPanel) -> None:
    s = panel.series
    if "peer_min" in s and "peer_max" in s:
        _draw_band(ax, s)
    else:  # only one end of the range was logged: show it as a thin line
        for role in ("peer_min", "peer_max"):
            if role in s:
                xs, ys = s[role]
                ax.plot(xs, ys, ":", color=_PEER_COLOR, marker="." if len(xs) == 1 else None,
                        label=f"{role.replace('_', ' ')} ({_fmt(ys[-1])})")
    if "peer_mean" in s:
        xs, ys = s["peer_mean"]
        ax.plot(xs, ys, "-", color=_PEER_COLOR, marker="D" if len(xs) == 1 else None, markersize=5,
                label=f"peer mean ({_fmt(ys[-1])})")
    if "avg" in s:
        xs, ys = s["avg"]
        ax.plot(xs, ys, "-", color=_AVG_COLOR, marker="o", markersize=5 if len(xs) <= 30 else 2.5,
                label=f"average model ({_fmt(ys[-1])})")
    if "value" in s:
        xs, ys = s["value"]
        ax.plot(xs, ys, "-", color=_VALUE_COLOR, marker="o" if len(xs) <= 30 else None,
                markersize=5 if len(xs) == 1 else 3, label=f"last {_fmt(ys[-1])}")
    # legend in reading order (average model, peer mean, peer range), whatever order things were drawn in
    handles, labels = ax.get_legend_handles_labels()
    prefixes = ("average", "peer mean", "peer min..")
    rank = [next((k for k, p in enumerate(prefixes) if label.startswith(p)), len(prefixes)) for label in labels]
    order = sorted(range(len(labels)), key=lambda i: rank[i])
    ax.legend([handles[i] for i in order], [labels[i] for i in order], fontsize=7, loc="best")
    ax.margins(y=0.08)


def _x_range(run: Run, panels: list[MetricPanel], x: str = ROUND) -> tuple[float, float]:
    """0 (or the first x, if earlier) .. the last round recorded (or the last x), padded so edge markers stay
    whole."""
    xs = [value for panel in panels for series_xs, _ in panel.series.values() for value in series_xs]
    lo = min([0.0, *xs])
    hi = max([float(run.rounds_done) if x == ROUND else 0.0, *xs])
    if hi <= lo:
        hi = lo + 1.0
    pad = 0.04 * (hi - lo)
    return lo - pad, hi + pad


def metrics_figure(run: Run, x: str = ROUND) -> Figure | None:
    """The figure of metrics.png (see ``metric_panels``), against round or, with x="sim_time_s", simulated time;
    None when the run has no eval metric and no loss (against that x)."""
    panels = metric_panels(run, x)
    if not panels:
        return None
    rows, cols = (2, 2) if len(panels) == 4 else _grid(len(panels))
    fig = _new_figure(4.4 * cols, 3.3 * rows)
    xlim = _x_range(run, panels, x)
    for i, panel in enumerate(panels):
        ax = fig.add_subplot(rows, cols, i + 1)
        _draw_panel(ax, panel)
        ax.set_xlim(*xlim)
        if x == ROUND:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(panel.title)
        ax.set_xlabel(X_LABELS[x])
        ax.grid(True, alpha=0.3)
    fig.suptitle(run.name, fontsize=9)
    fig.tight_layout()
    return fig


# ----- the plots --------------------------------------------------------------------------------------------------
def plot_metrics(run: Run, out_dir: Path) -> Path | None:
    """metrics.png: one panel per eval metric ``<name>`` (the average model's ``<name>_avg`` as a line with
    markers, the peers' ``<name>_peer_mean`` as a line, their min..max as a band), one per plain eval metric,
    and the mean training loss; all against round, on a shared x-range from 0 to the last round."""
    fig = metrics_figure(run)
    if fig is None:
        return None
    return _save(fig, out_dir / "metrics.png")


def plot_metrics_time(run: Run, out_dir: Path) -> Path | None:
    """metrics_time.png: metrics.png's panels against simulated time, for a run with the simulated clock on
    (its records carry sim_time_s); None for the others."""
    fig = metrics_figure(run, SIM_TIME) if run.has_sim_time else None
    if fig is None:
        return None
    return _save(fig, out_dir / "metrics_time.png")


def plot_consensus(run: Run, out_dir: Path) -> Path | None:
    """consensus.png: consensus distance against round (log scale) with the spectral prediction of the graphs
    actually used, c·Π σ2(W_t)² from the first positive value c (σ2 = ‖W_t − J‖₂ over the alive peers, from
    the round records); for runs without it, c0·lambda2^(2t) of the static W.

    The consensus distance is a mean of squared norms, so pure gossip shrinks it by at least σ2² a round under
    a doubly stochastic W; local training between rounds pushes the measured curve above the prediction.
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
    predicted = run.spectral_prediction()
    lam = second_eigenvalue(run)
    if predicted is not None:
        px, py = [x for x, y in zip(*predicted) if y > 0], [y for y in predicted[1] if y > 0]
        if len(px) >= 2:
            ax.plot(px, py, "--", label="gossip alone: c·Π σ2(W_t)², the graphs used")
    elif lam is not None and 0 < lam < 1:
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


def plot_per_peer_degree(run: Run, out_dir: Path) -> Path | None:
    """per_peer_degree.png: each peer's final value of every numeric per-peer metric against its in-degree,
    averaged over the rounds it took part in (crashed peers have no final value)."""
    per_peer, degree = run.final_per_peer(), run.mean_degree()
    if not per_peer or not degree:
        return None
    names = sorted({k for m in per_peer.values() for k, v in m.items() if is_number(v)})
    if not names:
        return None
    rows, cols = _grid(len(names))
    fig = _new_figure(4.2 * cols, 3.4 * rows)
    for i, name in enumerate(names):
        ax = fig.add_subplot(rows, cols, i + 1)
        peers = [p for p in per_peer if p in degree and is_number(per_peer[p].get(name))]
        xs = [degree[p] for p in peers]
        ys = [float(per_peer[p][name]) for p in peers]
        many = len(peers) > MANY_PEERS
        ax.scatter(xs, ys, s=2 if many else 18, color="tab:blue", rasterized=many, linewidths=0 if many else None)
        if len(peers) <= 40:
            for p, x, y in zip(peers, xs, ys):
                ax.annotate(p, (x, y), fontsize=6, xytext=(2, 2), textcoords="offset points")
        ax.set_title(name)
        ax.set_xlabel("mean in-degree over the rounds taken part in")
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"{run.name}: final per-peer metrics against degree", fontsize=9)
    fig.tight_layout()
    return _save(fig, out_dir / "per_peer_degree.png")


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
    fig = _new_figure(size + 1.2, size)
    ax = fig.add_subplot(1, 1, 1)
    nx.draw_networkx_edges(graph, pos, ax=ax, edgelist=edge_list, width=widths, edge_color="0.5")
    shares = consensus_shares(run)
    nodes = nx.draw_networkx_nodes(graph, pos, ax=ax, nodelist=list(range(n)), node_color=shares, cmap="viridis",
                                   vmin=0.0, vmax=float(max(shares.max(), 1e-12)), node_size=max(60, 500 - 4 * n))
    fig.colorbar(nodes, ax=ax, label="consensus share", shrink=0.8)
    if n <= 60:
        nx.draw_networkx_labels(graph, pos, ax=ax, font_size=8, font_color="white")
    if labels and len(edge_list) <= 60:
        nx.draw_networkx_edge_labels(graph, pos, ax=ax, edge_labels=labels, font_size=7)
    title = f"{run.topology_name}  (spectral gap {topo['stats']['spectral_gap']:.3f})"
    if any("/" in text for text in labels.values()):
        title += "\nedge labels W_ij/W_ji for i < j"
    ax.set_title(title)
    ax.set_axis_off()
    fig.tight_layout()
    return _save(fig, out_dir / "topology.png")


def _topology_histograms(run: Run, out_dir: Path) -> Path | None:
    """topology.png of a large graph: histograms of the peers' degrees (from the edges) and consensus shares,
    in time linear in the edges and peers (no layout, no drawing of K nodes)."""
    topo = run.topology
    assert topo is not None
    n = int(topo["stats"]["n_nodes"])
    edges = np.asarray(topo["edges"], dtype=np.int64).reshape(-1)
    degree = np.bincount(edges, minlength=n)
    shares = consensus_shares(run)
    fig = _new_figure(10, 4)
    ax = fig.add_subplot(1, 2, 1)
    ax.hist(degree, bins=np.arange(degree.min(), degree.max() + 2) - 0.5 if degree.max() - degree.min() < 60 else 40,
            color="tab:blue")
    ax.set_xlabel("degree")
    ax.set_ylabel("peers")
    ax.set_title(f"degree: mean {degree.mean():.3g}, min {degree.min()}, max {degree.max()}", fontsize=9)
    ax = fig.add_subplot(1, 2, 2)
    even = float(np.ptp(shares)) <= 1e-9 / n  # a doubly stochastic W: every share 1/K up to rounding
    ax.hist(shares, bins=41 if even else 40, color="tab:green", range=(0.5 / n, 1.5 / n) if even else None)
    ax.set_xlabel("consensus share")
    ax.set_title(f"consensus share: {'all' if even else 'max'} {shares.max():.3g} (uniform {1 / n:.3g})",
                 fontsize=9)
    fig.suptitle(f"{run.topology_name}, {n} peers (spectral gap {topo['stats']['spectral_gap']:.3f}); graph not "
                 f"drawn above {MANY_PEERS} peers", fontsize=9)
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
    spec = {str(s["peer"]): s for s in (run.peers_spec or [])}
    rows, cols = _grid(len(names))
    width = max(4.2, min(12.0, 1.5 + 0.3 * len(peers)))
    fig = _new_figure(width * cols, 3.4 * rows)
    for i, name in enumerate(names):
        ax = fig.add_subplot(rows, cols, i + 1)
        values = [per_peer[p].get(name) for p in peers]
        ys = [float(v) if is_number(v) else np.nan for v in values]
        if len(peers) > MANY_PEERS:  # K bars are K patches: one line of small markers instead
            ax.plot(range(len(peers)), ys, linestyle="none", marker=".", markersize=2, color="tab:blue",
                    rasterized=True)
        else:
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
            ax.set_xticklabels([p if p not in spec else f"{p}\n{spec[p]['task']}" for p in peers],
                               fontsize=7)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"{run.name}: round {run.final_eval()['round']}", fontsize=9)
    fig.tight_layout()
    return _save(fig, out_dir / "per_peer.png")


PLOTS: list[Callable[[Run, Path], Path | None]] = [
    plot_metrics, plot_metrics_time, plot_consensus, plot_topology, plot_partition, plot_per_peer, plot_per_peer_degree,
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
    if run.summarised and run.final_per_peer() is None:
        print(f"analysis: {run.name}: per_peer.png and per_peer_degree.png not drawn: the records summarise the "
              f"peers (more than --peer-records); metrics.png draws their min..max", flush=True)
    return written
