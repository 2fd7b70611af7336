"""What a run's metric figures show, as data: one ``MetricPanel`` per metric, against round, simulated time or
bytes sent (``analysis.metric_plots`` draws them).

Eval metric names: ``<name>_avg`` (the network-average model), ``<name>_peer_mean|_peer_min|_peer_max``
(statistics over the peers) and ``<name>_untrained`` (the untrained model: the panel's reference line) share one
panel per ``<name>``; any other name is a panel of its own, except the bookkeeping keys
(``p2pfl.records.BOOKKEEPING``, names ending in ``_count``), which count rather than measure and are not drawn.
The training loss (round records) is the last panel, with its spread over the peers.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from p2pfl.records import (
    AVG,
    BOOKKEEPING,
    COUNT,
    LOSS,
    MEAN,
    PEER_MAX,
    PEER_MEAN,
    PEER_MIN,
    SIM_TIME,
    STATS,
    SUMMARISED,
    UNTRAINED,
)

from .runs import ROUND, Run, cumulative_bytes_per_peer, is_number

__all__ = ["BYTES", "X_LABELS", "LOSS_PANEL", "MetricPanel", "Spread", "is_bookkeeping", "split_metric_name",
           "metric_panels", "x_of"]

#: The x of a metric against the cumulative bytes one peer sent (``cumulative_bytes_per_peer``).
BYTES = "bytes_sent_cumulative"
#: The axis label of each x a metric is drawn against (the bytes' unit is added when drawn).
X_LABELS = {ROUND: "round", SIM_TIME: "simulated time (s)", BYTES: "data sent per peer"}
#: The name of the training-loss panel (the round records' ``loss_mean``, over the peers ``loss``).
LOSS_PANEL = LOSS + MEAN
_ROLE_SUFFIXES = ((PEER_MEAN, "peer_mean"), (PEER_MIN, "peer_min"), (PEER_MAX, "peer_max"), (AVG, "avg"),
                  (UNTRAINED, "untrained"))

Series = tuple[list[float], list[float]]
Record = Mapping[str, object]


@dataclass
class Spread:
    """The peers' values of a metric at one x: each peer's value where the records keep them (``values``), and
    their min, mean and max over the ``count`` peers scored (also for summarised records)."""

    low: float
    high: float
    mean: float | None = None
    values: list[float] = field(default_factory=list)
    count: int = 0


@dataclass
class MetricPanel:
    """One panel: a metric ``name`` and its series by role, each (xs, values) with NaNs dropped.

    Roles: ``avg``, ``peer_mean``, ``peer_min``, ``peer_max`` for a grouped ``<name>``, ``value`` for a plain
    eval metric or the training loss's mean; ``reference`` the untrained model's value (the last recorded);
    ``spread`` the peers' values by x, where recorded.
    """

    name: str
    series: dict[str, Series] = field(default_factory=dict)
    reference: float | None = None
    spread: dict[float, Spread] = field(default_factory=dict)

    @property
    def xs(self) -> list[float]:
        """Every x the panel has a value at, sorted."""
        return sorted({x for xs, _ in self.series.values() for x in xs} | set(self.spread))

    @property
    def once(self) -> bool:
        """Whether the metric was evaluated at one x only (the final probe): drawn as a strip, not a series."""
        return len(self.xs) == 1


def is_bookkeeping(name: str) -> bool:
    """Whether an eval metric counts or indexes rather than measures (not drawn): BOOKKEEPING, ``*_count``."""
    return name in BOOKKEEPING or name.endswith(COUNT)


def split_metric_name(name: str) -> tuple[str, str]:
    """(base, role) of an eval metric name: ``probe_acc_peer_min`` -> (``probe_acc``, ``peer_min``),
    ``knn_acc_untrained`` -> (``knn_acc``, ``untrained``); a name without one of the suffixes (or with nothing
    before it) is (name, ``value``)."""
    for suffix, role in _ROLE_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], role
    return name, "value"


def x_of(run: Run, x: str) -> Callable[[Record], float | None]:
    """A record's x: its round, its ``sim_time_s`` or the cumulative bytes per peer up to its round (None where
    the record has none)."""
    if x == BYTES:
        cumulative = cumulative_bytes_per_peer(run)
        return lambda record: cumulative.get(float(record[ROUND]))  # type: ignore[arg-type]

    def at(record: Record) -> float | None:
        value = record.get(x)
        return float(value) if is_number(value) else None  # type: ignore[arg-type]
    return at


def _finite(value: object) -> bool:
    return is_number(value) and math.isfinite(float(value))  # type: ignore[arg-type]


def _eval_spread(record: Record, name: str) -> Spread | None:
    """The peers' values of ``name`` in one eval record: from ``per_peer``, or a summarised record's stats."""
    metrics: Mapping[str, object] = record["metrics"]  # type: ignore[assignment]
    values = [float(m[name]) for m in record.get("per_peer", {}).values()  # type: ignore[union-attr]
              if _finite(m.get(name))]
    if values:
        return Spread(min(values), max(values), sum(values) / len(values), values, len(values))
    stats = (record.get("per_peer_stats") or {}).get(name)  # type: ignore[union-attr]
    if stats and _finite(stats["min"]) and _finite(stats["max"]):
        return Spread(stats["min"], stats["max"], stats["mean"], [], stats["count"])
    low, high = metrics.get(name + PEER_MIN), metrics.get(name + PEER_MAX)
    if _finite(low) and _finite(high):
        mean = metrics.get(name + PEER_MEAN)
        return Spread(float(low), float(high), float(mean) if _finite(mean) else None)  # type: ignore[arg-type]
    return None


def _round_spread(record: Record, name: str) -> Spread | None:
    """The peers' values of a per-peer round metric (``loss``): {peer: value}, or a summarised record's stats."""
    if record.get(SUMMARISED):
        stats = record.get(name + STATS) or {}
        if _finite(stats.get("min")) and _finite(stats.get("max")):  # type: ignore[union-attr]
            return Spread(stats["min"], stats["max"], stats["mean"], [], stats["count"])  # type: ignore[index]
        return None
    values = [float(v) for v in (record.get(name) or {}).values() if _finite(v)]  # type: ignore[union-attr]
    return Spread(min(values), max(values), sum(values) / len(values), values, len(values)) if values else None


def metric_panels(run: Run, x: str = ROUND) -> list[MetricPanel]:
    """The panels of a run's metric figure against ``x`` (ROUND, SIM_TIME or BYTES): one per eval metric
    ``<name>`` in order of first appearance, then the training loss; bookkeeping keys left out, a panel whose
    only value is its reference too."""
    at = x_of(run, x)
    panels: dict[tuple[str, str], MetricPanel] = {}
    for record in run.evals:
        where = at(record)  # type: ignore[arg-type]
        if where is None:
            continue
        for key, value in record["metrics"].items():
            if not is_number(value) or math.isnan(value) or is_bookkeeping(key):
                continue
            base, role = split_metric_name(key)
            panel = panels.setdefault(("plain", key) if role == "value" else ("group", base),
                                      MetricPanel(name=key if role == "value" else base))
            if role == "untrained":
                panel.reference = float(value)
                continue
            xs, ys = panel.series.setdefault(role, ([], []))
            xs.append(where)
            ys.append(float(value))
            if role == "peer_min":
                spread = _eval_spread(record, base)  # type: ignore[arg-type]
                if spread is not None:
                    panel.spread[where] = spread
    result = [p for p in panels.values() if p.series]
    loss = MetricPanel(name=LOSS_PANEL)
    for record in run.rounds:
        where, value = at(record), record.get(LOSS_PANEL)  # type: ignore[arg-type]
        if where is None or not _finite(value):
            continue
        xs, ys = loss.series.setdefault("value", ([], []))
        xs.append(where)
        ys.append(float(value))  # type: ignore[arg-type]
        spread = _round_spread(record, LOSS)  # type: ignore[arg-type]
        if spread is not None:
            loss.spread[where] = spread
    return result + ([loss] if loss.series else [])
