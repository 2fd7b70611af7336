"""One look for every figure of ``analysis``: a run's ``plots/`` and a study's report.

Sizes, colours and line widths live here, with the conventions every panel follows:

- a *spread* (over a run's peers: min–max; over a study's seeds: the 95% interval) is a shaded band under its
  line, the band named in the legend;
- a *reference* value (the untrained encoder a trained one must beat) is a dashed grey horizontal line, labelled
  with its value;
- the headline line (the network-average model) is drawn last, on top.

Figures are built on matplotlib's Agg canvas directly (no pyplot state, no display), inside ``styled`` so the
rc settings below apply, and saved atomically (``save``).
"""
from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable, Sequence
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

from p2pfl.runtime.files import write_atomic

__all__ = ["PALETTE", "AVG_COLOUR", "PEER_COLOUR", "REFERENCE_COLOUR", "BAND_ALPHA", "LINE_WIDTH", "REFERENCE_STYLE",
           "RC", "styled", "grid", "new_figure", "save", "colour", "luminance", "text_colour", "draw_band",
           "draw_reference", "legend", "byte_unit", "bytes_axis", "spans"]

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


def save(fig: Figure, path: Path) -> Path:
    """Save ``fig`` as PNG to ``path`` atomically, at the print resolution."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    write_atomic(path, buf.getvalue())
    return path


def grid(n: int) -> tuple[int, int]:
    """(rows, columns) of a figure of ``n`` panels, at most three a row."""
    cols = max(1, min(n, 3))
    return math.ceil(n / cols), cols


def colour(i: int) -> str:
    """The i-th series colour (cycling)."""
    return PALETTE[i % len(PALETTE)]


def luminance(colour: str) -> float:
    """WCAG relative luminance of a colour (0 black .. 1 white)."""
    channels = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in to_rgb(colour)]
    return 0.2126 * channels[0] + 0.7152 * channels[1] + 0.0722 * channels[2]


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


def spans(ax: Axes, factor: float) -> bool:
    """Whether the panel's data are all positive and span at least ``factor`` from lowest to highest (then a log
    axis shows them better; below a decade a log axis has no labelled tick)."""
    low, high = ax.dataLim.intervaly
    return bool(low > 0 and high / low >= factor)


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
