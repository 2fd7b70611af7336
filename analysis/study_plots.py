"""Figures of a study report (analysis.study), written into the report folder.

Groups (points that differ only by seed) are drawn as one mark or line with its 95% Student-t interval over the
seeds; groups that share the labels of every axis but ``topology`` form one series (one colour). Each figure
function returns the written path, or None when the runs lack its data; files are replaced atomically.
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.ticker import MaxNLocator

from p2pfl.records import SIM_TIME

from .plots import X_LABELS, _grid, _new_figure, _save
from .runs import ROUND, Run, cumulative_bytes_per_peer
from .study import MEASURES, Group, Study, mean_ci

__all__ = ["plot_study", "plot_gap", "plot_measures", "plot_metric_rounds", "plot_metric_time", "plot_consensus",
           "plot_bytes", "cumulative_bytes_per_peer", "held"]

TOPOLOGY_AXIS = "topology"
Band = tuple[list[float], list[float], list[float], list[float]]  # x, mean, low, high


def _series_key(study: Study, group: Group) -> str:
    """The group's labels on every axis but topology and seed: what one series (colour) stands for."""
    return ", ".join(f"{a}={group.axes[a]}" for a in study.group_axes if a != TOPOLOGY_AXIS) or study.name


def _topology(group: Group) -> str:
    if TOPOLOGY_AXIS in group.axes:
        return group.axes[TOPOLOGY_AXIS]
    run = next((p.run for p in group.done if p.run is not None), None)
    return run.topology_name if run is not None else group.label


def _colours(study: Study) -> dict[str, tuple]:
    keys = list(dict.fromkeys(_series_key(study, g) for g in study.groups))
    cmap = colormaps["tab10"]
    return {k: cmap(i % 10) for i, k in enumerate(keys)}


def _runs(group: Group) -> list[Run]:
    return [p.run for p in group.done if p.run is not None]


def _band(curves: Iterable[dict[float, float]]) -> Band:
    """Mean and 95% interval over seeds at each round (an interval of zero width where only one seed has it)."""
    by_x: dict[float, list[float]] = {}
    for curve in curves:
        for x, y in curve.items():
            by_x.setdefault(x, []).append(y)
    xs = sorted(by_x)
    ivs = [mean_ci(by_x[x]) for x in xs]
    means = [iv.mean for iv in ivs]
    return (xs, means, [iv.low if iv.low is not None else iv.mean for iv in ivs],
            [iv.high if iv.high is not None else iv.mean for iv in ivs])


def _draw_band(ax, band: Band, colour, label: str, style: str = "-", fill: bool = True) -> None:
    xs, mean, low, high = band
    ax.plot(xs, mean, style, color=colour, marker="o" if len(xs) <= 30 else None, markersize=3, label=label)
    if fill and len(xs) >= 2:
        ax.fill_between(xs, low, high, color=colour, alpha=0.2, linewidth=0)
    elif fill:
        ax.errorbar(xs, mean, yerr=[np.subtract(mean, low), np.subtract(high, mean)], fmt="none", ecolor=colour,
                    capsize=4)


def _panels(study: Study) -> dict[str, list[Group]]:
    """Groups by topology label, in order of first appearance."""
    panels: dict[str, list[Group]] = {}
    for group in study.groups:
        panels.setdefault(_topology(group), []).append(group)
    return panels


def _against(ax, study: Study, metric: str, measure: str) -> bool:
    """Draw each group's final metric (mean, 95% interval over seeds as error bars) against its topology measure
    (analysis.study.MEASURES), one series per combination of the other axes; whether anything was drawn."""
    colours = _colours(study)
    series: dict[str, list[tuple[float, float, float, str]]] = {}
    for group in study.groups:
        iv, x = group.interval(metric), group.measure(measure)
        if iv is None or x is None:
            continue
        half = iv.half_width if iv.half_width is not None else 0.0
        series.setdefault(_series_key(study, group), []).append((x, iv.mean, half, _topology(group)))
    for key, marks in series.items():
        marks.sort()
        xs, ys, err, names = zip(*marks)
        ax.errorbar(xs, ys, yerr=err, fmt="-o", color=colours[key], capsize=4, markersize=5, label=key)
        for x, y, name in zip(xs, ys, names):
            ax.annotate(name, (x, y), fontsize=7, xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel(MEASURES[measure])
    ax.set_ylabel(f"final {metric}")
    ax.grid(True, alpha=0.3)
    if series:
        ax.legend(fontsize=7)
    return bool(series)


def plot_gap(study: Study, metric: str, out_dir: Path) -> Path | None:
    """spectral_gap.png: the final metric of each group against its topology's spectral gap 1 − |λ2(W)|, error
    bars the 95% interval over seeds; one series per combination of the other axes."""
    fig = _new_figure(6.5, 4.5)
    ax = fig.add_subplot(1, 1, 1)
    if not _against(ax, study, metric, "spectral_gap"):
        return None
    ax.set_title(f"{study.name}: final {metric} (95% CI over seeds)", fontsize=9)
    fig.tight_layout()
    return _save(fig, out_dir / "spectral_gap.png")


def plot_measures(study: Study, metric: str, out_dir: Path) -> Path | None:
    """measures.png: the final metric against the spectral gap, p and n_eff side by side (SPEC §10), mean and 95%
    interval over seeds per group; a panel whose measure no run has (n_eff of one-way graphs) says so."""
    fig = _new_figure(15, 4.5)
    drawn = False
    for i, measure in enumerate(MEASURES):
        ax = fig.add_subplot(1, len(MEASURES), i + 1)
        here = _against(ax, study, metric, measure)
        if not here:
            ax.text(0.5, 0.5, f"no {measure}", ha="center", va="center", transform=ax.transAxes, fontsize=8)
        drawn |= here
    if not drawn:
        return None
    fig.suptitle(f"{study.name}: final {metric} against the topology measures (95% CI over seeds)", fontsize=9)
    fig.tight_layout()
    return _save(fig, out_dir / "measures.png")


def _multi_panel(study: Study, out: Path, title: str, ylabel: str, draw, log: bool = False,
                 empty: str = "no data", x: str = ROUND) -> Path | None:
    """One panel per topology, against ``x`` (round or sim_time_s); ``draw(ax, group, colour, label)`` draws a
    group and says whether it had data; a panel without any says ``empty``."""
    panels, colours = _panels(study), _colours(study)
    rows, cols = _grid(len(panels)) if panels else (1, 1)
    fig = _new_figure(4.6 * cols, 3.5 * rows)
    drawn = False
    for i, (topology, groups) in enumerate(panels.items()):
        ax = fig.add_subplot(rows, cols, i + 1)
        here = False
        for group in groups:
            key = _series_key(study, group)
            here |= bool(draw(ax, group, colours[key], key))
        drawn |= here
        if not here:
            ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes, fontsize=8)
        elif log:
            ax.set_yscale("log")
        if x == ROUND:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(topology)
        ax.set_xlabel(X_LABELS[x])
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    if not drawn:
        return None
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return _save(fig, out)


def plot_metric_rounds(study: Study, metric: str, out_dir: Path) -> Path | None:
    """metric_rounds.png: the metric against round from the eval records, one panel per topology, mean over
    seeds with its 95% band."""
    def draw(ax, group: Group, colour, label: str) -> bool:
        curves = [dict(zip(*run.series(metric, source="evals"))) for run in _runs(group)]
        if not any(curves):
            return False
        _draw_band(ax, _band(c for c in curves if c), colour, label)
        return True

    return _multi_panel(study, out_dir / "metric_rounds.png", f"{study.name}: {metric} (mean, 95% CI over seeds)",
                        metric, draw)


def held(curve: dict[float, float], xs: Iterable[float]) -> dict[float, float]:
    """The curve's last value at or before each x within its span (first..last x): a seed's metric as it stood
    then, so seeds evaluated at different simulated times can be averaged at every time any of them has."""
    known = sorted(curve)
    out: dict[float, float] = {}
    for x in xs:
        if known and known[0] <= x <= known[-1]:
            out[x] = curve[known[bisect_right(known, x) - 1]]
    return out


def plot_metric_time(study: Study, metric: str, out_dir: Path) -> Path | None:
    """metric_time.png: the metric against simulated time from the eval records (runs with the simulated clock),
    one panel per topology, mean over seeds with its 95% band; each seed's last evaluation holds until its next
    (``held``), since seeds, and asynchronous runs' rounds, need not share evaluation times."""
    def draw(ax, group: Group, colour, label: str) -> bool:
        curves = [c for c in (dict(zip(*run.series(metric, source="evals", x=SIM_TIME))) for run in _runs(group))
                  if c]
        if not curves:
            return False
        times = sorted({t for c in curves for t in c})
        _draw_band(ax, _band(held(c, times) for c in curves), colour, label)
        return True

    return _multi_panel(study, out_dir / "metric_time.png",
                        f"{study.name}: {metric} against simulated time (mean, 95% CI over seeds)", metric, draw,
                        empty="no simulated time", x=SIM_TIME)


def plot_consensus(study: Study, out_dir: Path) -> Path | None:
    """consensus.png: consensus distance against round (log scale), mean over seeds with its 95% band, and the
    mean of the runs' spectral predictions c·Π σ2(W_t)² (dashed; Run.spectral_prediction)."""
    def draw(ax, group: Group, colour, label: str) -> bool:
        runs = _runs(group)
        curves = [{x: y for x, y in zip(*run.series("consensus_distance")) if y > 0} for run in runs]
        if not any(curves):
            return False
        _draw_band(ax, _band(c for c in curves if c), colour, f"{label}: measured")
        predicted = [dict(zip(*p)) for p in (run.spectral_prediction() for run in runs) if p is not None]
        if any(predicted):
            xs, mean, _, _ = _band(p for p in predicted if p)
            keep = [(x, y) for x, y in zip(xs, mean) if y > 0]
            if keep:
                ax.plot(*zip(*keep), "--", color=colour, label=f"{label}: c·Π σ2(W_t)²")
        return True

    return _multi_panel(study, out_dir / "consensus.png", f"{study.name}: consensus distance and gossip alone",
                        "consensus distance", draw, log=True,
                        empty="no positive consensus distance\n(exact averaging, or not recorded)")


def plot_bytes(study: Study, metric: str, out_dir: Path) -> Path | None:
    """bytes.png: the metric against the cumulative bytes sent per peer at each evaluation (mean over seeds of
    both, the metric's 95% band), one line per group (colour), line style by the axes other than topology."""
    cmap = colormaps["tab10"]
    styles = ["-", "--", ":", "-."]
    series = list(dict.fromkeys(_series_key(study, g) for g in study.groups))
    fig = _new_figure(7, 4.5)
    ax = fig.add_subplot(1, 1, 1)
    drawn = False
    for i, group in enumerate(study.groups):
        sent, values = [], []
        for run in _runs(group):
            cumulative = cumulative_bytes_per_peer(run)
            evals = {x: y for x, y in zip(*run.series(metric, source="evals")) if x in cumulative}
            sent.append({x: cumulative[x] / 2**20 for x in evals})
            values.append(evals)
        if not any(values):
            continue
        rounds, mean, low, high = _band(v for v in values if v)
        x_mean = _band(s for s in sent if s)[1]
        style = styles[series.index(_series_key(study, group)) % len(styles)]
        _draw_band(ax, (x_mean, mean, low, high), cmap(i % 10), group.label, style)
        drawn = True
    if not drawn:
        return None
    ax.set_xlabel("cumulative MiB sent per peer")
    ax.set_ylabel(metric)
    ax.set_title(f"{study.name}: {metric} against traffic (mean, 95% CI over seeds)", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    return _save(fig, out_dir / "bytes.png")


def plot_study(study: Study, out_dir: Path, metric: str | None) -> dict[str, Path]:
    """Every figure the study has data for, by title; a figure that fails is reported, not fatal."""
    import sys

    makers = [("consensus distance against round", lambda: plot_consensus(study, out_dir))]
    if metric is not None:
        makers = [(f"final {metric} against spectral gap", lambda: plot_gap(study, metric, out_dir)),
                  (f"final {metric} against spectral gap, p and n_eff", lambda: plot_measures(study, metric, out_dir)),
                  (f"{metric} against round", lambda: plot_metric_rounds(study, metric, out_dir)),
                  (f"{metric} against simulated time", lambda: plot_metric_time(study, metric, out_dir)),
                  *makers,
                  (f"{metric} against bytes sent per peer", lambda: plot_bytes(study, metric, out_dir))]
    written: dict[str, Path] = {}
    for title, make in makers:
        try:
            path = make()
        except Exception as exc:  # a broken figure must not lose the report
            print(f"analysis.report: figure {title!r} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        if path is not None:
            written[title] = path
    return written
