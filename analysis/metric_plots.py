"""A run's metric figures: metrics.png (against round), metrics_time.png (simulated time, runs with the clock)
and metrics_bytes.png (cumulative bytes sent per peer); the same panels (``analysis.metric_panels``) in the
same style (``analysis.style``) on three x axes.

In a panel: the peers' min–max as a band over the evaluations that scored the peers, their mean a thin line;
where only one evaluation scored them, their values as a strip with a box (quartiles; whiskers min–max) at that
x; the untrained model as a dashed reference line; the network-average model's line on top. A metric evaluated
once (the final linear probe) gets a panel of its own kind: the strip and box, the network average and the
reference as horizontal lines.
"""
from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, NullLocator

from p2pfl.records import SIM_TIME

from .labels import QUANTITIES, ROLE_LABELS, metric_label, metric_title, unit_label
from .metric_panels import BYTES, X_LABELS, MetricPanel, Spread, metric_panels
from .runs import ROUND, Run, cumulative_bytes_per_peer
from .style import (
    AVG_COLOUR,
    PEER_COLOUR,
    byte_unit,
    bytes_axis,
    draw_band,
    draw_reference,
    legend,
    new_figure,
    spans,
    styled,
)

__all__ = ["METRIC_LABELS", "ROLE_LABELS", "FILES", "metric_title", "metric_label", "metrics_figure", "figure_axes",
           "MANY_PEERS"]

#: Readable titles of the metrics (analysis.labels: the one table of labels, units and ranges).
METRIC_LABELS = {name: q.label for name, q in QUANTITIES.items()}
#: The file of each x.
FILES = {ROUND: "metrics.png", SIM_TIME: "metrics_time.png", BYTES: "metrics_bytes.png"}
#: Above this many peers a strip is drawn as small rasterised dots (K markers cost seconds at 2,000).
MANY_PEERS = 300
AVERAGE, PEERS, UNTRAINED_LABEL = "network average", "peers", "untrained model"
LEGEND_ORDER = (AVERAGE, "last", f"{PEERS}: mean", f"{PEERS}: min", PEERS, UNTRAINED_LABEL)


def _draw_spread_at(ax: Axes, x: float, spread: Spread, width: float) -> None:
    """The peers' values at one x: a box (quartiles, median; whiskers min–max) with the values as a strip; a
    summarised record's min–max as an error bar with its mean."""
    label = f"{PEERS} (n={spread.count or len(spread.values)})"
    if spread.values:
        values = np.asarray(spread.values)
        ax.boxplot(values, positions=[x], widths=width, whis=(0, 100), showfliers=False, manage_ticks=False,
                   patch_artist=True, zorder=2, boxprops={"facecolor": "none", "edgecolor": PEER_COLOUR},
                   medianprops={"color": PEER_COLOUR}, whiskerprops={"color": PEER_COLOUR},
                   capprops={"color": PEER_COLOUR})
        many = len(values) > MANY_PEERS
        offsets = np.linspace(-0.3, 0.3, len(values)) * width if len(values) > 1 else np.zeros(1)
        ax.scatter(x + offsets, values, s=3 if many else 16, color=PEER_COLOUR, alpha=0.5 if many else 0.85,
                   linewidths=0, rasterized=many, zorder=3, label=f"{label}; box: quartiles, min–max")
        return
    mid = spread.mean if spread.mean is not None else (spread.low + spread.high) / 2
    ax.errorbar([x], [mid], yerr=[[max(mid - spread.low, 0.0)], [max(spread.high - mid, 0.0)]], fmt="D",
                color=PEER_COLOUR, markersize=5, capsize=6, elinewidth=1.5, zorder=3,
                label=f"{label}: mean, min–max")


def _draw_series_panel(ax: Axes, panel: MetricPanel, xlim: tuple[float, float]) -> None:
    """A metric over several x: band, peer mean, strip at a lone scored x, reference, average on top."""
    s, spread = panel.series, panel.spread
    band = sorted(spread)
    if len(band) >= 2:
        draw_band(ax, band, [spread[x].low for x in band], [spread[x].high for x in band], PEER_COLOUR,
                  f"{PEERS}: min–max")
        if "peer_mean" in s:  # under the network average a thin line; the panel's headline without one
            xs, ys = s["peer_mean"]
            headline = "avg" not in s
            ax.plot(xs, ys, "-", color=PEER_COLOUR, linewidth=None if headline else 1.0,
                    marker="o" if headline and len(xs) <= 30 else None, zorder=3,
                    label=f"{PEERS}: mean ({ys[-1]:.4g})")
    elif band:
        _draw_spread_at(ax, band[0], spread[band[0]], 0.05 * (xlim[1] - xlim[0]))
    if panel.reference is not None:
        draw_reference(ax, panel.reference, UNTRAINED_LABEL)
    if "value" in s:  # a plain metric, or the training loss's mean over the peers (its band drawn above)
        xs, ys = s["value"]
        ax.plot(xs, ys, "-", color=PEER_COLOUR if spread else AVG_COLOUR, marker="o" if len(xs) <= 30 else None,
                zorder=4, label=f"{PEERS}: mean ({ys[-1]:.4g})" if spread else f"value ({ys[-1]:.4g})")
    if "avg" in s:
        xs, ys = s["avg"]
        ax.plot(xs, ys, "-", color=AVG_COLOUR, marker="o" if len(xs) <= 30 else None, zorder=4,
                label=f"{AVERAGE} ({ys[-1]:.4g})")
    ax.set_xlim(*xlim)


def _draw_once_panel(ax: Axes, panel: MetricPanel, at: str) -> None:
    """A metric evaluated once: the peers' strip and box, the network average and the reference as lines."""
    (x,) = panel.xs
    if x in panel.spread:
        _draw_spread_at(ax, 0.0, panel.spread[x], 0.5)
    if panel.reference is not None:
        draw_reference(ax, panel.reference, UNTRAINED_LABEL)
    for role in ("avg", "value"):
        if role in panel.series:
            value = panel.series[role][1][0]
            name = AVERAGE if role == "avg" else f"{PEERS}: mean" if panel.spread else "value"
            ax.axhline(value, color=AVG_COLOUR, zorder=4, label=f"{name} ({value:.4g})")
    ax.set_xlim(-0.8, 0.8)
    ax.xaxis.set_major_locator(NullLocator())
    ax.set_xlabel(f"evaluated once, at {at}")
    ax.grid(False, axis="x")
    ax.margins(y=0.1)
    legend(ax, LEGEND_ORDER, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncols=1)


def _x_range(run: Run, panels: list[MetricPanel], x: str) -> tuple[float, float]:
    """0 (or the first x, if earlier) .. the last round recorded (or the last x), padded so markers stay whole."""
    xs = [v for panel in panels for v in panel.xs]
    lo = min([0.0, *xs])
    hi = max([float(run.rounds_done) if x == ROUND else 0.0, *xs])
    if hi <= lo:
        hi = lo + 1.0
    pad = 0.04 * (hi - lo)
    return lo - pad, hi + pad


def _at_label(x: str, value: float) -> str:
    if x == ROUND:
        return f"round {value:g}"
    if x == SIM_TIME:
        return f"{value:.4g} s simulated"
    unit, scale = byte_unit(value)
    return f"{value / scale:.4g} {unit} sent per peer"


#: A panel whose positive data span this factor or more gets a log y axis (distances that shrink by decades).
LOG_SPAN = 100
SERIES_SPAN, ONCE_SPAN, WIDTH_PER_COLUMN, ROW_HEIGHT = 4, 3, 1.15, 3.5


def _layout(series: int, once: int) -> tuple[Figure, list[Axes]]:
    """A figure with ``series`` panels three a row, then ``once`` narrower panels four a row (12 columns)."""
    columns = max(SERIES_SPAN * min(series, 3), ONCE_SPAN * min(once, 4))
    rows_series, rows_once = -(-series // 3), -(-once // 4)
    fig = new_figure(WIDTH_PER_COLUMN * columns, ROW_HEIGHT * (rows_series + rows_once) + (0.4 if once else 0))
    spec = fig.add_gridspec(rows_series + rows_once, columns)
    axes = [fig.add_subplot(spec[i // 3, SERIES_SPAN * (i % 3):SERIES_SPAN * (i % 3 + 1)]) for i in range(series)]
    axes += [fig.add_subplot(spec[rows_series + i // 4, ONCE_SPAN * (i % 4):ONCE_SPAN * (i % 4 + 1)])
             for i in range(once)]
    return fig, axes


@styled
def metrics_figure(run: Run, x: str = ROUND) -> Figure | None:
    """The run's metric panels against ``x``: ROUND, SIM_TIME (None for a run without the clock) or BYTES (None
    for a run that sent nothing); None when the run has no eval metric and no loss against that x. Metrics over
    several x come first (on one x-range from 0), then those evaluated once."""
    if (x == SIM_TIME and not run.has_sim_time) or (x == BYTES and not any(cumulative_bytes_per_peer(run).values())):
        return None
    panels = metric_panels(run, x)
    if not panels:
        return None
    series, once = [p for p in panels if not p.once], [p for p in panels if p.once]
    fig, axes = _layout(len(series), len(once))
    xlim = _x_range(run, panels, x)
    for ax, panel in zip(axes, series + once):
        if panel.once:
            _draw_once_panel(ax, panel, _at_label(x, panel.xs[0]))
            ax.set_title(metric_title(panel.name))
            ax.set_ylabel(unit_label(panel.name))
            continue
        _draw_series_panel(ax, panel, xlim)
        if spans(ax, LOG_SPAN):
            ax.set_yscale("log")
        label = X_LABELS[x]
        if x == ROUND:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        elif x == BYTES:
            label += f" ({bytes_axis(ax, xlim[1])})"
        ax.set_xlabel(label)
        ax.set_ylabel(unit_label(panel.name))
        ax.set_title(metric_title(panel.name))
        ax.margins(y=0.1)
        legend(ax, LEGEND_ORDER)
    fig.suptitle(run.title)
    fig.tight_layout()
    return fig


def figure_axes(fig: Figure) -> dict[str, Axes]:
    """The panels of a metric figure by metric key (the key in parentheses in the title, or the title)."""
    out = {}
    for ax in fig.axes:
        title = ax.get_title()
        out[title[title.rfind("(") + 1:-1] if title.endswith(")") else title] = ax
    return out
