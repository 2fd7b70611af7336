"""One look for every figure of ``analysis``: a run's ``plots/`` and a study's report.

Sizes, colours and line widths live here, with the conventions every panel follows:

- a *spread* (over a run's peers: min–max; over a study's seeds: the 95% interval) is a shaded band under its
  line, the band named in the legend;
- a *reference* value (the untrained encoder a trained one must beat) is a dashed grey horizontal line, labelled
  with its value;
- the headline line (the network-average model) is drawn last, on top;
- legends sit off the data: beside a panel (``legend_beside``) or below a figure's panels (``figure_legend``);
  the panels of one figure share their y range (``share_y``), and an x that spans more than two decades (bytes
  sent) is drawn on a log axis (``log_x_if_spans``).

Figures are built on matplotlib's Agg canvas directly (no pyplot state, no display), inside ``styled`` so the
rc settings below apply, and saved atomically (``save``) in each format ``plot_formats`` names (``--plot-format
png,pdf,svg``; PNG by default): ``metrics.png`` is also written as ``metrics.pdf`` and ``metrics.svg``.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import io
import math
import textwrap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import matplotlib
from cycler import cycler
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from p2pfl.config import plot_format_names
from p2pfl.runtime.files import write_atomic
from topologies.plot import contrast_text, luminance

__all__ = ["PALETTE", "AVG_COLOUR", "PEER_COLOUR", "REFERENCE_COLOUR", "BAND_ALPHA", "LINE_WIDTH", "REFERENCE_STYLE",
           "RC", "styled", "wrapped", "grid", "new_figure", "save", "plot_formats", "saved_files", "colour",
           "luminance", "contrast_text", "text_colour", "draw_band", "draw_reference", "draw_zeros", "ZERO_LABEL",
           "legend", "figure_legend", "legend_beside", "share_y", "log_x_if_spans", "byte_unit", "bytes_axis",
           "spans"]

#: Okabe–Ito: distinguishable with the common colour-vision deficiencies and in greyscale print.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
AVG_COLOUR = PALETTE[0]  # the network-average model, a study's first series
PEER_COLOUR = PALETTE[1]  # the peers: their band, mean and strip
REFERENCE_COLOUR = "0.35"
BAND_ALPHA = 0.25
LINE_WIDTH = 1.8
REFERENCE_STYLE: dict[str, Any] = {"color": REFERENCE_COLOUR, "linestyle": (0, (5, 3)), "linewidth": 1.3}
DPI = 150

RC: dict[str, Any] = {
    "font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "xtick.labelsize": 8, "ytick.labelsize": 8,
    "legend.fontsize": 7.5, "legend.framealpha": 0.9, "legend.borderaxespad": 0.4, "figure.titlesize": 10,
    "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.3,
    "grid.linewidth": 0.6, "lines.linewidth": LINE_WIDTH, "lines.markersize": 4.5,
    "axes.prop_cycle": cycler(color=list(PALETTE)), "axes.formatter.useoffset": False,
    "axes.formatter.limits": (-3, 4),
}

F = TypeVar("F", bound=Callable[..., Any])


def styled(function: F) -> F:
    """Run a figure-building function under ``RC``: rc settings are read as artists are made, so the whole
    build (not only the save) must see them."""
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with matplotlib.rc_context(RC):
            return function(*args, **kwargs)
    return wrapper  # type: ignore[return-value]


def new_figure(width: float, height: float) -> Figure:
    """A figure on its own Agg canvas (inches)."""
    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


_FORMATS: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("plot_formats", default=("png",))


@contextlib.contextmanager
def plot_formats(formats: str | Sequence[str] | None) -> Iterator[tuple[str, ...]]:
    """Within the block, ``save`` writes each figure in these formats (a --plot-format value: "png,pdf", or a
    sequence; None keeps the current ones). ValueError naming the format for one matplotlib is not asked for."""
    names = _FORMATS.get() if formats is None else tuple(plot_format_names(
        formats if isinstance(formats, str) else ",".join(formats)))
    token = _FORMATS.set(names)
    try:
        yield names
    finally:
        _FORMATS.reset(token)


def saved_files(path: Path) -> list[Path]:
    """The files ``save(fig, path)`` writes under the current formats."""
    return [path.with_suffix(f".{fmt}") for fmt in _FORMATS.get()]


def save(fig: Figure, path: Path) -> Path:
    """Save ``fig`` atomically to ``path`` in every current format (``plot_formats``; the suffix replaced), raster
    formats at the print resolution, PDF and SVG as vectors; return the first file written."""
    files = saved_files(path)
    for file in files:
        buf = io.BytesIO()
        fig.savefig(buf, format=file.suffix[1:], dpi=DPI, metadata=_METADATA.get(file.suffix[1:]))
        write_atomic(file, buf.getvalue())
    return files[0]


#: No creation date in vector files, so the same run draws the same bytes.
_METADATA: dict[str, dict[str, Any]] = {"pdf": {"CreationDate": None}, "svg": {"Date": None}}


#: Characters of a title (10 pt) that fit one inch of figure width.
TITLE_CHARS_PER_INCH = 11


def wrapped(title: str, width_in: float) -> str:
    """``title`` broken into lines that fit a figure ``width_in`` inches wide (at word boundaries)."""
    return "\n".join(textwrap.wrap(title, max(30, int(TITLE_CHARS_PER_INCH * width_in)), break_long_words=False))


def grid(n: int) -> tuple[int, int]:
    """(rows, columns) of a figure of ``n`` panels, at most three a row."""
    cols = max(1, min(n, 3))
    return math.ceil(n / cols), cols


def colour(i: int) -> str:
    """The i-th series colour (cycling)."""
    return PALETTE[i % len(PALETTE)]


def text_colour(colour: str, contrast: float = 3.0) -> tuple[float, float, float]:
    """``colour`` darkened (its hue kept) until text in it has at least ``contrast`` : 1 against white (WCAG's
    ratio; 3 for labels): the palette's yellow reads on a line but not as a word."""
    rgb = to_rgb(colour)
    for step in range(21):
        darker = tuple(c * (1 - step / 20) for c in rgb)
        if 1.05 / (luminance(darker) + 0.05) >= contrast:  # type: ignore[arg-type]
            return darker  # type: ignore[return-value]
    return (0.0, 0.0, 0.0)


def draw_band(ax: Axes, xs: Sequence[float], low: Sequence[float], high: Sequence[float], colour: str,
              label: str | None) -> None:
    """A spread as a shaded band from ``low`` to ``high``, under the lines (zorder 1)."""
    ax.fill_between(xs, low, high, color=colour, alpha=BAND_ALPHA, linewidth=0, label=label, zorder=1)


#: The legend entry of exact zeros on a log axis (which cannot show 0): a marker on the panel's bottom edge.
ZERO_LABEL = "exactly 0 (marked at the bottom)"


def draw_zeros(ax: Axes, xs: Sequence[float], colour: str, label: str | None = ZERO_LABEL) -> None:
    """Values that are exactly 0 on a log y axis: a hollow triangle at each x on the panel's bottom edge (x in
    data, y in axes coordinates), so exact consensus reads as such, not as missing data."""
    if len(xs):
        ax.scatter(xs, [0.0] * len(xs), transform=ax.get_xaxis_transform(), marker="v", s=28, clip_on=False,
                   facecolors="none", edgecolors=colour, linewidths=1.2, zorder=5, label=label)


def draw_reference(ax: Axes, value: float, label: str) -> None:
    """A reference value as a dashed grey horizontal line across the panel, labelled ``label (value)``."""
    ax.axhline(value, label=f"{label} ({value:.4g})", zorder=1.5, **REFERENCE_STYLE)


def legend(ax: Axes, order: Sequence[str] = (), extra: Sequence[tuple[Artist, str]] = (), **kwargs: Any) -> None:
    """The panel's legend, entries whose label starts with one of ``order`` first in that order, then ``extra``
    (handle, label) keys (what a band means), placed where it covers the least data (``loc="best"``) unless
    ``kwargs`` say otherwise; nothing without labelled artists."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    handles += [h for h, _ in extra]
    labels += [label for _, label in extra]
    rank = [next((k for k, p in enumerate(order) if label.startswith(p)), len(order)) for label in labels]
    keep = sorted(range(len(labels)), key=lambda i: rank[i])
    ax.legend([handles[i] for i in keep], [labels[i] for i in keep], **{"loc": "best", **kwargs})


def figure_legend(fig: Figure, extra: Sequence[tuple[Artist, str]] = (), order: Sequence[str] = ()) -> None:
    """One legend for every panel of ``fig``, below them and off the data ("outside lower center": the figure's
    constrained layout, ``fig.set_layout_engine("constrained")``, makes room for it): the labelled artists of all
    its axes, one entry per label (panels share their series' colours), ``order`` first as in ``legend``, then
    ``extra`` keys; nothing without labelled artists."""
    seen: dict[str, Artist] = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    if not seen:
        return
    labels = sorted(seen, key=lambda lab: next((k for k, p in enumerate(order) if lab.startswith(p)), len(order)))
    handles = [seen[lab] for lab in labels] + [h for h, _ in extra]
    labels += [lab for _, lab in extra]
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 2 if len(fig.axes) < 2 else 3))


def legend_beside(ax: Axes, extra: Sequence[tuple[Artist, str]] = (), order: Sequence[str] = ()) -> None:
    """``legend`` to the right of the panel, off its data (tight_layout and constrained layout make room)."""
    legend(ax, order, extra, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)


#: A shared y range is padded this much beyond the measured data: a linear axis by this fraction of its span, a
#: log axis by this factor, so that a prediction (a bound) drawn with it never stretches the axis.
Y_PAD, LOG_Y_PAD = 0.05, 2.0


def share_y(axes: Sequence[Axes], bounds: tuple[float | None, float | None] = (None, None),
            log: bool = False) -> tuple[float, float] | None:
    """Give every panel of a figure one y range, that of their data (``dataLim``: the measured values and bands;
    a prediction added as an artist, not a plot, does not count), padded (``Y_PAD``, on a log axis ``LOG_Y_PAD``)
    and cut to ``bounds`` (the metric's range, analysis.labels.metric_range: accuracies [0, 1]); return it, or
    None when no panel has data."""
    spans_ = [ax.dataLim.intervaly for ax in axes if ax.has_data()]
    spans_ = [(lo, hi) for lo, hi in spans_ if math.isfinite(lo) and math.isfinite(hi)]
    if log:
        spans_ = [(lo, hi) for lo, hi in spans_ if lo > 0]
    if not spans_:
        return None
    low, high = min(lo for lo, _ in spans_), max(hi for _, hi in spans_)
    if log:
        low, high = low / LOG_Y_PAD, high * LOG_Y_PAD
    else:
        pad = Y_PAD * (high - low) if high > low else 0.05 * (abs(high) or 1.0)
        low, high = low - pad, high + pad
        if bounds[0] is not None:
            low = max(low, bounds[0])
        if bounds[1] is not None:
            high = min(high, bounds[1])
    for ax in axes:
        ax.set_ylim(low, high)
    return low, high


#: An x axis whose positive values span more than this factor (two decades) is drawn on a log scale.
LOG_X_SPAN = 100.0


def log_x_if_spans(ax: Axes, xs: Sequence[float], factor: float = LOG_X_SPAN) -> bool:
    """Put the panel's x axis on a log scale when its values are all positive and span more than ``factor``
    (bytes sent from the first evaluation to the last); whether it did."""
    values = [float(x) for x in xs if math.isfinite(float(x))]
    if not values or min(values) <= 0 or max(values) / min(values) <= factor:
        return False
    ax.set_xscale("log")
    return True


def spans(ax: Axes, factor: float) -> bool:
    """Whether the panel's data are all positive and span at least ``factor`` from lowest to highest (then a log
    axis shows them better; below a decade a log axis has no labelled tick)."""
    low, high = ax.dataLim.intervaly
    return bool(math.isfinite(low) and math.isfinite(high) and low > 0 and high / low >= factor)


BYTE_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1))


def byte_unit(largest: float) -> tuple[str, int]:
    """The binary unit to show byte counts up to ``largest`` in: the largest unit it reaches (B below 1 KiB)."""
    return next(((name, scale) for name, scale in BYTE_UNITS if abs(largest) >= scale), BYTE_UNITS[-1])


class _ScaledLocator(MaxNLocator):
    """Round ticks in a unit (1, 2, 5, 10 MiB) for data in bytes."""

    def __init__(self, scale: float) -> None:
        super().__init__(nbins="auto", steps=[1, 2, 2.5, 5, 10])
        self.scale = scale

    def tick_values(self, vmin: float, vmax: float) -> Any:
        return super().tick_values(vmin / self.scale, vmax / self.scale) * self.scale


def bytes_axis(ax: Axes, largest: float) -> str:
    """Tick an x axis whose data are bytes in the binary unit of ``largest`` (the data stay in bytes); return the
    unit, for the axis label."""
    unit, scale = byte_unit(largest)
    ax.xaxis.set_major_locator(_ScaledLocator(scale))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value / scale:g}"))
    return unit
