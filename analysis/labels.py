"""The one table every figure takes its metric names, units and ranges from (run plots, study figures, frontier).

A metric key is ``<base><role suffix>`` (analysis.metric_panels.split_metric_name: ``test_acc_avg`` is the
network-average model's ``test_acc``); ``QUANTITIES`` describes each base: a readable label, its unit (empty for
a number without one, such as a loss) and the range it cannot leave (accuracies lie in [0, 1]: an interval drawn
for them is clipped to it). A base missing from the table is labelled by its key, without a unit or range.
Imports no matplotlib: tables and tests read it too.
"""
from __future__ import annotations

from dataclasses import dataclass

from .metric_panels import LOSS_PANEL, split_metric_name

__all__ = ["Quantity", "QUANTITIES", "ROLE_LABELS", "quantity", "metric_title", "metric_label", "axis_label",
           "unit_label", "metric_range"]


@dataclass(frozen=True)
class Quantity:
    """What a metric measures: its label, unit ("" for none) and the closed range its values lie in (None: open)."""

    label: str
    unit: str = ""
    low: float | None = None
    high: float | None = None


_ACCURACY = dict(unit="fraction correct", low=0.0, high=1.0)

#: Base metric name -> what it measures (the metrics the methods record; docs/metrics.md defines them).
QUANTITIES: dict[str, Quantity] = {
    "test_acc": Quantity("test accuracy", **_ACCURACY),  # type: ignore[arg-type]
    "probe_acc": Quantity("linear-probe accuracy", **_ACCURACY),  # type: ignore[arg-type]
    "knn_acc": Quantity("kNN accuracy", **_ACCURACY),  # type: ignore[arg-type]
    "task_metric": Quantity("task metric"),
    "drift_to_avg": Quantity("distance to the average", "L2, summed over tensors", low=0.0),
    "drift_to_neighbours": Quantity("distance to neighbours", "L2, summed over tensors", low=0.0),
    "zeta2": Quantity("heterogeneity ζ² at the average", "squared gradient norm", low=0.0),
    LOSS_PANEL: Quantity("training loss", low=0.0),
    "loss": Quantity("training loss", low=0.0),
    "consensus_distance": Quantity("consensus distance", "relative to ‖x̄‖²", low=0.0),
    "distance_to_mean": Quantity("distance to the peers' mean", "L2", low=0.0),
    "distance_to_initial_mean": Quantity("distance to the initial mean", "L2", low=0.0),
    "mean_shift": Quantity("shift of the peers' mean", "L2", low=0.0),
    "error": Quantity("error", low=0.0),
    "sim_time_s": Quantity("simulated time", "s", low=0.0),
    "wall_s": Quantity("wall time", "s", low=0.0),
}

#: How a metric key names its model or statistic (analysis.metric_panels.split_metric_name's roles).
ROLE_LABELS = {"avg": "network average", "peer_mean": "peers' mean", "peer_min": "lowest peer",
               "peer_max": "highest peer", "untrained": "untrained model", "value": ""}


def quantity(key: str) -> Quantity:
    """What a metric key (``test_acc_avg``, ``loss_mean``, ``consensus_distance``) measures: its base's entry, or
    a Quantity labelled by the base itself."""
    if key in QUANTITIES:
        return QUANTITIES[key]
    base, _ = split_metric_name(key)
    return QUANTITIES.get(base, Quantity(base))


#: A title longer than this puts its key on a second line: a narrow panel's one-line title would run past it.
ONE_LINE_TITLE = 36


def metric_title(name: str) -> str:
    """A panel's title: the readable label and the key (the key alone when the table has no label for it), the key
    on a second line when both would exceed ONE_LINE_TITLE characters."""
    label = QUANTITIES[name].label if name in QUANTITIES else None
    if not label or label == name:
        return name
    one_line = f"{label} ({name})"
    return one_line if len(one_line) <= ONE_LINE_TITLE else f"{label}\n({name})"


def metric_label(key: str) -> str:
    """A label naming the metric and its model: ``test_acc_avg`` -> "test accuracy, network average",
    ``loss_peer_max`` -> "training loss, highest peer"; a base without a readable label stays as written."""
    if key in QUANTITIES:
        return QUANTITIES[key].label
    base, role = split_metric_name(key)
    label = QUANTITIES[base].label if base in QUANTITIES else base
    return f"{label}, {ROLE_LABELS[role]}" if ROLE_LABELS[role] else label


def axis_label(key: str, prefix: str = "") -> str:
    """A y-axis label: ``metric_label`` (after ``prefix``, e.g. "final ") with the unit in parentheses."""
    unit = quantity(key).unit
    return f"{prefix}{metric_label(key)}" + (f" ({unit})" if unit else "")


def unit_label(key: str) -> str:
    """The y label of a panel whose title names the metric (a run's figures): its unit, else its label."""
    return quantity(key).unit or metric_label(key)


def metric_range(key: str) -> tuple[float | None, float | None]:
    """The closed range the metric's values lie in ((0, 1) for accuracies; None: unbounded on that side)."""
    q = quantity(key)
    return q.low, q.high
