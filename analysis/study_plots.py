"""Figures of a study report (analysis.study), written into the report folder.

Groups (points that differ only by seed) are drawn as one mark or line, their mean (or IQM: ``aggregate``) over
the seeds with the interval of the report's tables (analysis.intervals: from 3 seeds a 95% confidence interval
cut to the range the metric can take, accuracies [0, 1]; at 2 seeds, whose t-interval is wider than anything the
metric can take, their min–max), said in the legend and title in the tables' words; groups that share the
labels of every axis but ``topology`` form one series (one colour). In a study whose arms set the topology in
their options (no ``topology`` axis), the measure figures mark each arm with its own shape instead, coloured by
the other axes, arms at one measure side by side. Each figure function returns the written path, or None when the
runs lack its data; files are replaced atomically.
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, MaxNLocator
from matplotlib.transforms import offset_copy

from p2pfl.records import AVG, PEER_MEAN, SIM_TIME, UNTRAINED

from .intervals import MEAN, MIN_CI_SEEDS, MIN_MAX, Estimate, aggregate_label, ci_kind, estimate, n_words
from .labels import axis_label, metric_label, metric_range
from .metric_panels import BYTES, X_LABELS
from .runs import ROUND, Run, cumulative_bytes_per_peer, is_number
from .study import MEASURES, Group, Study
from .style import (
    BAND_ALPHA,
    PALETTE,
    ZERO_LABEL,
    byte_unit,
    bytes_axis,
    draw_band,
    draw_reference,
    draw_zeros,
    figure_legend,
    grid,
    legend,
    legend_beside,
    log_x_if_spans,
    new_figure,
    save,
    share_y,
    styled,
    wrapped,
)

__all__ = ["plot_study", "plot_gap", "plot_measures", "plot_metric_rounds", "plot_metric_time", "plot_consensus",
           "plot_bytes", "bytes_figure", "cumulative_bytes_per_peer", "held", "topology_axes", "plot_compare",
           "compare_figure", "compare_axis_error", "compare_metrics", "contraction", "prediction_within"]

TOPOLOGY_AXIS = "topology"
Band = tuple[list[float], list[float], list[float], list[float]]  # x, mean, low, high


def _series_key(study: Study, group: Group, topology: Iterable[str] = (TOPOLOGY_AXIS,)) -> str:
    """The group's labels on every axis but the ``topology`` ones and seed: what one series (colour) stands for."""
    return ", ".join(f"{a}={group.axes[a]}" for a in study.group_axes if a not in topology) or "mean over seeds"


def _topology(group: Group) -> str:
    if TOPOLOGY_AXIS in group.axes:
        return group.axes[TOPOLOGY_AXIS]
    run = next((p.run for p in group.done if p.run is not None), None)
    return run.topology_name if run is not None else group.label


def _colours(study: Study) -> dict[str, str]:
    """One colour (analysis.style's palette) per series, in order of first appearance."""
    keys = list(dict.fromkeys(_series_key(study, g) for g in study.groups))
    return {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(keys)}


def _runs(group: Group) -> list[Run]:
    return [p.run for p in group.done if p.run is not None]


def _all_runs(study: Study) -> list[Run]:
    return [run for group in study.groups for run in _runs(group)]


def spread(values: Iterable[float], metric: str | None = None, aggregate: str = MEAN) -> Estimate | None:
    """A group's values over seeds as the report's tables give them (analysis.intervals.estimate): mean or IQM,
    a 95% CI from MIN_CI_SEEDS seeds on, the min–max at 2 (one seed: none), within the metric's range
    (analysis.labels.metric_range); None for no values."""
    return estimate(values, aggregate, metric_range(metric) if metric is not None else (None, None))


def fewest_seeds(study: Study) -> int:
    """The fewest finished seeds of any group that has one (0: none has)."""
    return min((g.n_done for g in study.groups if g.n_done), default=0)


def spread_words(study: Study, aggregate: str = MEAN) -> str:
    """What a study figure's intervals are, for its title and legend, in the words of the tables' cells
    (analysis.intervals: "min–max", "t 95% CI", "bootstrap 95% CI") with the groups' n."""
    ns = [g.n_done for g in study.groups]
    ci, pairs = [n for n in ns if n >= MIN_CI_SEEDS], [n for n in ns if n == 2]
    if ci:
        return f"{ci_kind(aggregate)} over seeds, {n_words(ci)}" + (f"; {MIN_MAX} where n\u00a0=\u00a02"
                                                                     if pairs else "")
    if pairs:
        return f"{MIN_MAX} over seeds: n\u00a0=\u00a02, no CI at n\u00a0<\u00a0{MIN_CI_SEEDS}"
    return "one seed: no interval"


def final_spread(group: Group, metric: str, aggregate: str = MEAN) -> Estimate | None:
    """``spread`` of a group's final metric over its finished seeds (the table's cell)."""
    return group.estimate(metric, aggregate)


def _band(curves: Iterable[dict[float, float]], metric: str | None = None, aggregate: str = MEAN) -> Band:
    """Mean (or IQM) and spread (``spread``) over seeds at each round (of zero width where only one seed has
    it)."""
    by_x: dict[float, list[float]] = {}
    for curve in curves:
        for x, y in curve.items():
            by_x.setdefault(x, []).append(y)
    xs = sorted(by_x)
    ivs = [spread(by_x[x], metric, aggregate) for x in xs]
    values = [iv.value for iv in ivs]
    return (xs, values, [iv.low if iv.low is not None else iv.value for iv in ivs],
            [iv.high if iv.high is not None else iv.value for iv in ivs])


def _ci_key(study: Study, aggregate: str = MEAN) -> tuple[Patch, str]:
    return Patch(facecolor="0.5", alpha=BAND_ALPHA, linewidth=0), f"shaded: {spread_words(study, aggregate)}"


def _words(study: Study, aggregate: str) -> str:
    """'mean, t 95% CI over seeds, n = 3': a title's parenthesis."""
    return f"{aggregate_label(aggregate)}, {spread_words(study, aggregate)}"


def _draw_band(ax, band: Band, line_colour: str, label: str, style: str = "-", fill: bool = True) -> None:
    """A group's mean over seeds as a line, its 95% interval as a band (an error bar at a lone x)."""
    xs, mean, low, high = band
    ax.plot(xs, mean, style, color=line_colour, marker="o" if len(xs) <= 30 else None, zorder=3, label=label)
    if fill and len(xs) >= 2:
        draw_band(ax, xs, low, high, line_colour, None)
    elif fill:
        ax.errorbar(xs, mean, yerr=[np.subtract(mean, low), np.subtract(high, mean)], fmt="none", ecolor=line_colour,
                    capsize=4)


def _untrained(runs: Iterable[Run], metric: str) -> float | None:
    """The untrained model's value of an ``<name>_avg`` metric, ``<name>_untrained`` of the runs' final
    evaluations, averaged over the runs that record it (None where none does, or the metric is not an _avg)."""
    if not metric.endswith(AVG):
        return None
    key = metric.removesuffix(AVG) + UNTRAINED
    values = [float(run.final_metrics()[key]) for run in runs if is_number(run.final_metrics().get(key))]
    return sum(values) / len(values) if values else None


def _panels(study: Study) -> dict[str, list[Group]]:
    """Groups by topology label, in order of first appearance."""
    panels: dict[str, list[Group]] = {}
    for group in study.groups:
        panels.setdefault(_topology(group), []).append(group)
    return panels


def topology_axes(study: Study) -> list[str]:
    """The axes whose label fixes the topology: ``topology`` itself, or, in a study without one, every axis each
    of whose labels ran on one topology only while the axis spans several (a ``scheme`` axis whose arms set
    ``topology:`` in their options)."""
    if TOPOLOGY_AXIS in study.group_axes:
        return [TOPOLOGY_AXIS]
    carrying = []
    for axis in study.group_axes:
        seen: dict[str, set[str]] = {}
        for group in study.groups:
            if _runs(group):
                seen.setdefault(group.axes[axis], set()).add(_topology(group))
        if len({t for ts in seen.values() for t in ts}) > 1 and all(len(ts) == 1 for ts in seen.values()):
            carrying.append(axis)
    return carrying


#: Marker shapes of a study's arms in the measure figures when arms, not a topology axis, set the topology.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")
#: Points at one measure value are set this many display points apart, side by side (their x is the same).
DODGE_PT = 3.0


def _against(ax, study: Study, metric: str, measure: str, key: bool = True, aggregate: str = MEAN) -> bool:
    """Draw each group's final metric (mean or IQM, its interval over seeds as error bars) against its topology
    measure
    (analysis.study.MEASURES); whether anything was drawn. With a ``topology`` axis: one line per combination of
    the other axes, each mark labelled with its topology. Where other axes set the topology (``topology_axes``):
    colour by the remaining axes, marker by the topology-setting labels, no lines, and marks that share a
    measure value set side by side; the key (legend) beside the panel, drawn where ``key``."""
    carrying = topology_axes(study)
    if TOPOLOGY_AXIS in carrying or not carrying:
        drawn = _against_lines(ax, study, metric, measure, aggregate)
    else:
        drawn = _against_arms(ax, study, metric, measure, carrying, key, aggregate)
    ax.set_xlabel(MEASURES[measure])
    ax.set_ylabel(axis_label(metric, "final "))
    ax.margins(x=0.1, y=0.08)  # room for the labels and dodged marks beside the outermost values
    return drawn


def _against_arms(ax, study: Study, metric: str, measure: str, carrying: list[str], key: bool,
                  aggregate: str = MEAN) -> bool:
    """``_against`` where the ``carrying`` axes set the topology: a marker per arm, a colour per series."""
    def keys(group: Group) -> tuple[str, str]:
        return _series_key(study, group, carrying), ", ".join(group.axes[a] for a in carrying)

    # colours and markers from every group with the metric, so that they mean the same in every panel
    scored = [(g, iv) for g in study.groups if (iv := final_spread(g, metric, aggregate)) is not None]
    colour_keys = list(dict.fromkeys(keys(g)[0] for g, _ in scored))
    marker_keys = list(dict.fromkeys(keys(g)[1] for g, _ in scored))
    marks = [(x, iv.value, _error(iv), *keys(g)) for g, iv in scored if (x := g.measure(measure)) is not None]
    at_x: dict[float, list[int]] = {}
    for i, m in enumerate(marks):
        at_x.setdefault(m[0], []).append(i)
    fig = ax.figure
    for x, members in at_x.items():
        members.sort(key=lambda i: (marker_keys.index(marks[i][4]), colour_keys.index(marks[i][3])))
        for k, i in enumerate(members):
            _, y, (below, above), colour_key, marker_key = marks[i]
            shift = offset_copy(ax.transData, fig=fig, x=(k - (len(members) - 1) / 2) * DODGE_PT, units="points")
            ax.errorbar([x], [y], yerr=[[below], [above]], fmt=MARKERS[marker_keys.index(marker_key) % len(MARKERS)],
                        color=PALETTE[colour_keys.index(colour_key) % len(PALETTE)], capsize=2, markersize=5,
                        elinewidth=1, transform=shift)
            ax.update_datalim([(x, y - below), (x, y + above)])  # artists off transData do not extend the limits
    ax.autoscale_view()
    handles = [Line2D([], [], color=PALETTE[i % len(PALETTE)], marker="s", linestyle="", label=name)
               for i, name in enumerate(colour_keys)]
    handles += [Line2D([], [], color="0.3", marker=MARKERS[i % len(MARKERS)], linestyle="", label=name)
                for i, name in enumerate(marker_keys)]
    if handles and key:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    return bool(marks)


def _error(iv: Estimate) -> tuple[float, float]:
    """An error bar's (below, above) the value: a cut, min–max or bootstrap interval need not be symmetric."""
    if iv.low is None or iv.high is None:
        return 0.0, 0.0
    return max(iv.value - iv.low, 0.0), max(iv.high - iv.value, 0.0)


def _against_lines(ax, study: Study, metric: str, measure: str, aggregate: str = MEAN) -> bool:
    """``_against`` for a study with a topology axis: one series (line) per combination of the other axes."""
    colours = _colours(study)
    series: dict[str, list[tuple[float, float, tuple[float, float], str]]] = {}
    for group in study.groups:
        iv, x = final_spread(group, metric, aggregate), group.measure(measure)
        if iv is None or x is None:
            continue
        series.setdefault(_series_key(study, group), []).append((x, iv.value, _error(iv), _topology(group)))
    for key, marks in series.items():
        marks.sort()
        xs, ys, err, names = zip(*marks)
        ax.errorbar(xs, ys, yerr=np.transpose(err), fmt="-o", color=colours[key], capsize=4, markersize=5, label=key)
        for x, y, name in zip(xs, ys, names):
            ax.annotate(name, (x, y), fontsize=7.5, xytext=(4, 4), textcoords="offset points")
    legend(ax)
    return bool(series)


def measured(study: Study, measure: str) -> set[float]:
    """The distinct values of a topology measure over the study's groups (fewer than 2: nothing to plot against)."""
    return {x for g in study.groups if (x := g.measure(measure)) is not None}


@styled
def plot_gap(study: Study, metric: str, out_dir: Path, aggregate: str = MEAN) -> Path | None:
    """spectral_gap.png: the final metric of each group against its network's spectral gap 1 − |λ2(E[W])|
    (analysis.study.MEASURES, the same definition for static and changing networks), error bars the spread over
    seeds (``spread``); one series per combination of the other axes; not drawn when every group has the same gap."""
    if len(measured(study, "spectral_gap")) < 2:
        return None  # one topology's gap: a column of marks on an axis of nothing
    fig = new_figure(6.5, 4.5)
    ax = fig.add_subplot(1, 1, 1)
    if not _against(ax, study, metric, "spectral_gap", aggregate=aggregate):
        return None
    ax.set_title(wrapped(f"{study.name}: final {metric_label(metric)} ({_words(study, aggregate)})", 6.5))
    fig.tight_layout()
    return save(fig, out_dir / "spectral_gap.png")


@styled
def plot_measures(study: Study, metric: str, out_dir: Path, aggregate: str = MEAN) -> Path | None:
    """measures.png: the final metric against each of analysis.study.MEASURES side by side (SPEC §10: spectral gap,
    worst-case p, p_mean and n_eff, one definition a panel, its x label naming it), mean (or IQM) and interval over
    seeds per group, on one y range; a panel whose measure no run has (n_eff of one-way graphs) says so."""
    if all(len(measured(study, measure)) < 2 for measure in MEASURES):
        return None
    fig = new_figure(4.75 * len(MEASURES), 4.5)
    drawn = False
    for i, measure in enumerate(MEASURES):
        ax = fig.add_subplot(1, len(MEASURES), i + 1)
        values = measured(study, measure)
        here = len(values) >= 2 and _against(ax, study, metric, measure, key=i == len(MEASURES) - 1,
                                                 aggregate=aggregate)
        if not here:
            ax.text(0.5, 0.5, f"{measure} {next(iter(values)):.3g} for every group" if values else f"no {measure}",
                    ha="center", va="center", transform=ax.transAxes)
        drawn |= here
    if not drawn:
        return None
    share_y(fig.axes, metric_range(metric))  # one metric on every panel: one y range
    fig.suptitle(f"{study.name}: final {metric_label(metric)} against the topology measures "
                 f"({_words(study, aggregate)})")
    fig.tight_layout()
    return save(fig, out_dir / "measures.png")


def _share_x_from_zero(axes) -> None:
    """One x-range for every panel, from 0 (or the first x, if earlier) to the last x of any, padded: panels of
    different topologies compare at a glance, and a lone point is not a degenerate range around itself."""
    spans = [ax.dataLim.intervalx for ax in axes if ax.has_data()]
    if not spans:
        return
    low, high = min(0.0, *(s[0] for s in spans)), max(s[1] for s in spans)
    pad = 0.04 * (high - low) if high > low else 0.5
    for ax in axes:
        ax.set_xlim(low - pad, high + pad)


def _share_log_y(axes, log: bool) -> bool:
    """Whether a figure asked for a log y (``log``) gets one: every panel's data positive and, together, spanning a
    decade or more (a log axis over less has no labelled tick); one decision for all panels, which share y."""
    spans_ = [ax.dataLim.intervaly for ax in axes if ax.has_data()]
    spans_ = [(lo, hi) for lo, hi in spans_ if np.isfinite(lo) and np.isfinite(hi)]
    if not log or not spans_:
        return False
    low, high = min(lo for lo, _ in spans_), max(hi for _, hi in spans_)
    return bool(low > 0 and high / low >= 10)


@styled
def _multi_panel(study: Study, out: Path, title: str, ylabel: str, draw, log: bool = False,
                 empty: str = "no data", x: str = ROUND, reference: float | None = None,
                 aggregate: str = MEAN, metric: str | None = None, notes: list[str] | None = None) -> Path | None:
    """One panel per topology, against ``x`` (round or sim_time_s); ``draw(ax, group, colour, label)`` draws a
    group and says whether it had data; a panel without any says ``empty``; ``reference`` (the untrained model's
    value) a dashed line in every panel. The panels share one y range (``share_y``: their data's, cut to the
    ``metric``'s range; with ``log``, one log axis for all where their data span a decade) and one x range from 0;
    one legend below them, with ``notes`` (filled by ``draw``: what was left out and why) as entries of their
    own."""
    panels, colours = _panels(study), _colours(study)
    rows, cols = grid(len(panels)) if panels else (1, 1)
    fig = new_figure(4.6 * cols, 3.6 * rows + 0.6)
    fig.set_layout_engine("constrained")
    drawn = False
    first = None
    for i, (topology, groups) in enumerate(panels.items()):
        ax = fig.add_subplot(rows, cols, i + 1, sharey=first)
        first = first or ax
        here = False
        for group in groups:
            key = _series_key(study, group)
            here |= bool(draw(ax, group, colours[key], key))
        drawn |= here
        if not here:
            ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes)
        if here and reference is not None:
            draw_reference(ax, reference, "untrained model")
        if x == ROUND:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(topology)
        ax.set_xlabel(X_LABELS[x])
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    if not drawn:
        return None
    logged = _share_log_y(fig.axes, log)
    if logged:
        fig.axes[0].set_yscale("log")  # shared: every panel
    share_y(fig.axes, (None, None) if logged else metric_range(metric) if metric else (None, None), log=logged)
    if log and not logged:  # linear after all: from 0, where the exact zeros' marks on the bottom edge then sit
        for ax in fig.axes:
            ax.set_ylim(bottom=0.0)
    _share_x_from_zero(fig.axes)
    fig.suptitle(wrapped(title, fig.get_figwidth()))
    figure_legend(fig, extra=[_ci_key(study, aggregate), *_notes(notes)])
    return save(fig, out)


def _notes(notes: Iterable[str] | None) -> list[tuple[Line2D, str]]:
    """Legend entries that are words only (no mark): why something is not drawn."""
    return [(Line2D([], [], linestyle="none"), note) for note in dict.fromkeys(notes or ())]


def plot_metric_rounds(study: Study, metric: str, out_dir: Path, aggregate: str = MEAN) -> Path | None:
    """metric_rounds.png: the metric against round from the eval records, one panel per topology, mean (or IQM)
    over seeds with its band."""
    def draw(ax, group: Group, colour, label: str) -> bool:
        curves = [dict(zip(*run.series(metric, source="evals"))) for run in _runs(group)]
        if not any(curves):
            return False
        _draw_band(ax, _band((c for c in curves if c), metric, aggregate), colour, label)
        return True

    return _multi_panel(study, out_dir / "metric_rounds.png",
                        f"{study.name}: {metric_label(metric)} ({_words(study, aggregate)})",
                        axis_label(metric), draw, reference=_untrained(_all_runs(study), metric), aggregate=aggregate,
                        metric=metric)


def held(curve: dict[float, float], xs: Iterable[float]) -> dict[float, float]:
    """The curve's last value at or before each x within its span (first..last x): a seed's metric as it stood
    then, so seeds evaluated at different simulated times can be averaged at every time any of them has."""
    known = sorted(curve)
    out: dict[float, float] = {}
    for x in xs:
        if known and known[0] <= x <= known[-1]:
            out[x] = curve[known[bisect_right(known, x) - 1]]
    return out


def plot_metric_time(study: Study, metric: str, out_dir: Path, aggregate: str = MEAN) -> Path | None:
    """metric_time.png: the metric against simulated time from the eval records (runs with the simulated clock),
    one panel per topology, mean (or IQM) over seeds with its band; each seed's last evaluation holds until its next
    (``held``), since seeds, and asynchronous runs' rounds, need not share evaluation times."""
    def draw(ax, group: Group, colour, label: str) -> bool:
        curves = [c for c in (dict(zip(*run.series(metric, source="evals", x=SIM_TIME))) for run in _runs(group))
                  if c]
        if not curves:
            return False
        times = sorted({t for c in curves for t in c})
        _draw_band(ax, _band((held(c, times) for c in curves), metric, aggregate), colour, label)
        return True

    return _multi_panel(study, out_dir / "metric_time.png",
                        f"{study.name}: {metric_label(metric)} against simulated time ({_words(study, aggregate)})",
                        axis_label(metric), draw, empty="no simulated time", x=SIM_TIME,
                        reference=_untrained(_all_runs(study), metric), aggregate=aggregate, metric=metric)


def contraction(prediction: tuple[list[float], list[float]]) -> float:
    """The largest one-round factor of a spectral prediction c·Π σ2(W_t)² (Run.spectral_prediction): σ2(W_t)² at
    its worst round. Below 1 the prediction bounds what gossip alone leaves; at 1 or above (a row-stochastic but
    not doubly stochastic W, EL-Local's: σ2 = ‖W − J‖₂ > 1) it rises and bounds nothing."""
    ys = prediction[1]
    return max((b / a for a, b in zip(ys, ys[1:]) if a > 0), default=0.0)


#: Why a prediction is not drawn (a legend entry of the consensus figures).
NO_BOUND = "no gossip-alone prediction: σ2(W) > 1 (W not doubly stochastic), c·Π σ2² would rise, bounding nothing"


def prediction_within(prediction: tuple[list[float], list[float]], low: float, high: float
                      ) -> tuple[list[float], list[float]]:
    """The positive points of a prediction within the measured x range [low, high]."""
    keep = [(x, y) for x, y in zip(*prediction) if low <= x <= high and y > 0]
    return [x for x, _ in keep], [y for _, y in keep]


def plot_consensus(study: Study, out_dir: Path, aggregate: str = MEAN) -> Path | None:
    """consensus.png: consensus distance against round (log scale), mean (or IQM) over seeds with its band
    (``spread``), and the mean of the runs' spectral predictions c·Π σ2(W_t)² (dashed; Run.spectral_prediction)
    where it bounds (no round of any seed rises: ``Run.prediction_rises``; else a legend entry says why not) and
    only over the rounds measured, without widening the y axis (an artist outside the data limits, clipped by the
    panel). Rounds at which every seed is at exact consensus (0, which a log axis cannot show: the complete graph)
    are marked on the panel's bottom edge and named in the legend, not dropped as if missing."""
    notes: list[str] = []

    def draw(ax, group: Group, colour, label: str) -> bool:
        runs = _runs(group)
        series = [dict(zip(*run.series("consensus_distance"))) for run in runs]
        curves = [{x: y for x, y in c.items() if y > 0} for c in series]
        zeros = sorted(set.intersection(*(set(x for x, y in c.items() if y == 0) for c in series))) if series else []
        if not any(curves) and not zeros:
            return False
        if any(curves):
            _draw_band(ax, _band((c for c in curves if c), "consensus_distance", aggregate), colour,
                       f"{label}: measured")
        draw_zeros(ax, zeros, colour, f"{label}: {ZERO_LABEL}")
        predicted = [p for p in (run.spectral_prediction() for run in runs) if p is not None and p[0]]
        measured_x = [x for c in curves for x in c] + list(zeros)
        if predicted and measured_x:
            if any(Run.prediction_rises(p) for p in predicted):
                notes.append(f"{label}: {NO_BOUND}")
            else:
                xs, mean, _, _ = _band(dict(zip(*p)) for p in predicted)
                px, py = prediction_within((xs, mean), min(measured_x), max(measured_x))
                if len(px) >= 2:
                    ax.add_artist(Line2D(px, py, linestyle="--", color=colour, label=f"{label}: c·Π σ2(W_t)²"))
        if zeros:  # the marks on the edge do not extend the x range
            ax.update_datalim([(min(zeros), 1.0), (max(zeros), 1.0)], updatey=False)
        return True

    return _multi_panel(study, out_dir / "consensus.png",
                        f"{study.name}: consensus distance and gossip alone ({_words(study, aggregate)})",
                        axis_label("consensus_distance"), draw, log=True,
                        empty="no consensus distance recorded", aggregate=aggregate, metric="consensus_distance",
                        notes=notes)


def plot_bytes(study: Study, metric: str, out_dir: Path, aggregate: str = MEAN) -> Path | None:
    """bytes.png: ``bytes_figure``; None when no group has the metric."""
    fig = bytes_figure(study, metric, aggregate)
    return None if fig is None else save(fig, out_dir / "bytes.png")


@styled
def bytes_figure(study: Study, metric: str, aggregate: str = MEAN) -> Figure | None:
    """The metric against the cumulative bytes sent per peer at each evaluation (x the mean over seeds, y the
    metric's mean or IQM with its band), one line per group (colour, labelled with the group), line style by the
    axes other than topology; the x data in bytes, ticked in a binary unit, on a log axis where they span more than
    two decades (``log_x_if_spans``); the legend beside the panel."""
    styles = ["-", "--", ":", "-."]
    series = list(dict.fromkeys(_series_key(study, g) for g in study.groups))
    fig = new_figure(8.5, 4.5)
    ax = fig.add_subplot(1, 1, 1)
    drawn = False
    every_x: list[float] = []
    for i, group in enumerate(study.groups):
        sent, values = [], []
        for run in _runs(group):
            cumulative = cumulative_bytes_per_peer(run)
            evals = {x: y for x, y in zip(*run.series(metric, source="evals")) if x in cumulative}
            sent.append({x: cumulative[x] for x in evals})
            values.append(evals)
        if not any(values):
            continue
        rounds, mean, low, high = _band((v for v in values if v), metric, aggregate)
        x_mean = _band(s for s in sent if s)[1]
        every_x += x_mean
        style = styles[series.index(_series_key(study, group)) % len(styles)]
        _draw_band(ax, (x_mean, mean, low, high), PALETTE[i % len(PALETTE)], group.label, style)
        drawn = True
    if not drawn:
        return None
    reference = _untrained(_all_runs(study), metric)
    if reference is not None:
        draw_reference(ax, reference, "untrained model")
    if log_x_if_spans(ax, every_x):
        unit, scale = byte_unit(max(every_x))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value / scale:g}"))
        ax.set_xlabel(f"{X_LABELS[BYTES]} ({unit}, log scale)")
    else:
        ax.set_xlabel(f"{X_LABELS[BYTES]} ({bytes_axis(ax, ax.get_xlim()[1])})")
    ax.set_ylabel(axis_label(metric))
    ax.set_title(wrapped(f"{study.name}: {metric_label(metric)} against traffic ({_words(study, aggregate)})", 6))
    legend_beside(ax, extra=[_ci_key(study, aggregate)])
    fig.tight_layout()
    return fig


# ----- --compare AXIS: the arms of one axis on one shared axis ---------------------------------------------------
def compare_axis_error(study: Study, axis: str) -> str | None:
    """Why ``--compare axis`` cannot be drawn for the study (None: it can): an axis of the plan other than the
    seed, or ``topology`` in a study whose arms set it in their options."""
    if axis in study.group_axes or (axis == TOPOLOGY_AXIS and study.groups):
        return None
    return (f"--compare {axis}: not an axis of the study; its axes: {', '.join(study.group_axes) or 'none'}"
            + (" (the seed is averaged over, not compared)" if axis == "seed" else ""))


def _arm(group: Group, axis: str) -> str:
    """A group's label on the compared axis (its topology's name where the plan has no ``topology`` axis)."""
    return group.axes[axis] if axis in group.axes else _topology(group)


def compare_metrics(study: Study, metric: str) -> list[str]:
    """The panels of the compare figure: the headline quantity's peers' mean, worst peer and network average,
    those the runs report (analysis.study.ordered_metrics), where ``metric`` is one of them; else ``metric``."""
    from .study import _role, ordered_metrics, worst_peer

    base, role = _role(metric)
    if role not in ("peer_mean", "worst", "avg"):
        return [metric]
    trio = [base + PEER_MEAN, base + worst_peer(base), base + AVG]
    return ordered_metrics([m for m in trio if m in study.metrics], metric)


@styled
def compare_figure(study: Study, axis: str, metric: str, aggregate: str = MEAN) -> Figure | None:
    """The metric against round with the arms of ``axis`` (e.g. topology) on one shared axis: one panel per metric
    of ``compare_metrics`` (peers' mean, worst peer, network average), in each one line per arm (colour; the
    other axes' combinations by line style), mean (or IQM) over seeds with its band; the panels share y (cut to
    the metric's range) and x, one legend below them. None when no group has the metric's series."""
    metrics = compare_metrics(study, metric)
    arms = list(dict.fromkeys(_arm(g, axis) for g in study.groups))
    others = list(dict.fromkeys(_series_key(study, g, (axis,)) for g in study.groups))
    styles = ["-", "--", ":", "-."]
    fig = new_figure(max(4.6 * len(metrics), 6.0), 4.4)
    fig.set_layout_engine("constrained")
    drawn = False
    first = None
    for i, name in enumerate(metrics):
        ax = fig.add_subplot(1, len(metrics), i + 1, sharey=first)
        first = first or ax
        for group in study.groups:
            curves = [c for c in (dict(zip(*run.series(name, source="evals"))) for run in _runs(group)) if c]
            if not curves:
                continue
            arm, other = _arm(group, axis), _series_key(study, group, (axis,))
            label = arm if len(others) == 1 else f"{arm}, {other}"
            _draw_band(ax, _band(curves, name, aggregate), PALETTE[arms.index(arm) % len(PALETTE)], label,
                       styles[others.index(other) % len(styles)])
            drawn = True
        ax.set_title(metric_label(name))
        ax.set_xlabel(X_LABELS[ROUND])
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(axis_label(name) if i == 0 else "")
    if not drawn:
        return None
    share_y(fig.axes, metric_range(metric))
    _share_x_from_zero(fig.axes)
    fig.suptitle(wrapped(f"{study.name}: {metric_label(metric).split(',')[0]} by {axis} "
                         f"({_words(study, aggregate)})", fig.get_figwidth()))
    figure_legend(fig, extra=[_ci_key(study, aggregate)])
    return fig


def plot_compare(study: Study, axis: str, metric: str, out_dir: Path, aggregate: str = MEAN) -> Path | None:
    """compare-AXIS.png: ``compare_figure``; None when no group has the metric's series."""
    fig = compare_figure(study, axis, metric, aggregate)
    return None if fig is None else save(fig, out_dir / f"compare-{axis}.png")


def plot_study(study: Study, out_dir: Path, metric: str | None, aggregate: str = MEAN,
               compare: str | None = None) -> dict[str, Path]:
    """Every figure the study has data for, by title, each group its ``aggregate`` (mean or iqm) over seeds, with
    ``compare`` (an axis) the compare figure first; a figure that fails is reported, not fatal."""
    import sys

    makers = [("consensus distance against round", lambda: plot_consensus(study, out_dir, aggregate))]
    if metric is not None:
        makers = [(f"final {metric} against spectral gap", lambda: plot_gap(study, metric, out_dir, aggregate)),
                  (f"final {metric} against spectral gap, p, p_mean and n_eff",
                   lambda: plot_measures(study, metric, out_dir, aggregate)),
                  (f"{metric} against round", lambda: plot_metric_rounds(study, metric, out_dir, aggregate)),
                  (f"{metric} against simulated time", lambda: plot_metric_time(study, metric, out_dir, aggregate)),
                  *makers,
                  (f"{metric} against bytes sent per peer", lambda: plot_bytes(study, metric, out_dir, aggregate))]
        if compare is not None:
            makers.insert(0, (f"{metric} against round by {compare}",
                              lambda: plot_compare(study, compare, metric, out_dir, aggregate)))
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
