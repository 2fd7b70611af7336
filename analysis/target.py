"""Time to target: per arm of a study, when its seeds first reach a metric's target value.

    python -m analysis.report STUDY_DIR --metric M --target VALUE [--direction higher|lower]

Per finished seed, the first evaluation (in file order, no interpolation) whose metric is >= VALUE, or <= VALUE
for a metric where lower is better (`metric_lower_is_better`, or --direction), gives three costs: the simulated
seconds of that evaluation (runs with the simulated clock), its round (for --mode async, the index of its batch
of events) and the bytes one peer sent up to it. Each arm reports the mean (or IQM: --aggregate) of each cost over
the seeds that reached the target, with the interval of analysis.intervals (min–max at n = 2, a 95% confidence
interval from n = 3 on, cut at 0: no cost is negative), and how many of its finished seeds did ("2/3 reached"); a
seed that never reaches the target is counted, not averaged in.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from p2pfl.records import SIM_TIME

from .intervals import MEAN, Estimate, cell, csv_cells, csv_columns, estimate, note
from .runs import ROUND, Run, cumulative_bytes_per_peer, is_number
from .study import Group, Study, _md_table

__all__ = ["COSTS", "LOWER_IS_BETTER_WORDS", "Reach", "Target", "first_reach", "metric_lower_is_better", "reaches",
           "target_columns", "target_markdown"]

#: A metric is lower-is-better when one of the words of its name (split on "_") is one of these: losses, errors,
#: distances (consensus_distance, distance_to_mean), drifts (drift_to_avg), shifts (mean_shift); else higher is
#: better (accuracies).
LOWER_IS_BETTER_WORDS = frozenset({"loss", "error", "distance", "drift", "shift", "mse"})
MIB = 2 ** 20


def metric_lower_is_better(metric: str) -> bool:
    """Whether smaller values of an eval metric are better (LOWER_IS_BETTER_WORDS)."""
    return not LOWER_IS_BETTER_WORDS.isdisjoint(metric.lower().split("_"))


@dataclass(frozen=True)
class Target:
    """A metric's target value and its direction (lower: reached at <= value, else at >= value)."""

    metric: str
    value: float
    lower: bool

    @classmethod
    def of(cls, metric: str, value: float, direction: str | None = None) -> Target:
        """The target with ``direction`` "higher" or "lower", or the metric's own (``metric_lower_is_better``)."""
        return cls(metric, value, metric_lower_is_better(metric) if direction is None else direction == "lower")

    @property
    def label(self) -> str:
        return f"{self.metric} {'≤' if self.lower else '≥'} {self.value:g}"

    def reached(self, value: float) -> bool:
        return value <= self.value if self.lower else value >= self.value


@dataclass(frozen=True)
class Reach:
    """One run's first evaluation at the target: its simulated time (None without the clock), its round and the
    bytes one peer sent up to it."""

    sim_time_s: float | None
    round: float
    bytes_per_peer: float


def _bytes_until(cumulative: dict[float, float], round_: float) -> float:
    """Bytes one peer sent up to the last recorded round at or before ``round_``."""
    return cumulative[max((r for r in cumulative if r <= round_), default=0.0)]


def first_reach(run: Run, target: Target) -> Reach | None:
    """The first evaluation of the run whose metric reaches the target, or None when none does."""
    for record in run.evals:
        value = record["metrics"].get(target.metric)
        if is_number(value) and not math.isnan(float(value)) and target.reached(float(value)):
            at = record.get(SIM_TIME)
            round_ = float(record[ROUND])
            return Reach(float(at) if is_number(at) else None, round_,
                         _bytes_until(cumulative_bytes_per_peer(run), round_))
    return None


def reaches(group: Group, target: Target) -> list[Reach | None]:
    """first_reach of each finished seed of the group (None for a seed that never reaches the target)."""
    return [first_reach(p.run, target) for p in group.done if p.run is not None]


#: The costs of reaching the target: column name -> (label, its value from a Reach, scale of the markdown cell).
COSTS: dict[str, tuple[str, Callable[[Reach], float | None], float]] = {
    "sim_time_s": ("simulated time (s)", lambda r: r.sim_time_s, 1.0),
    "rounds": ("rounds", lambda r: r.round, 1.0),
    "bytes_per_peer": ("MiB sent per peer", lambda r: r.bytes_per_peer, 1.0 / MIB),
}


def cost_interval(found: Sequence[Reach | None], cost: str, aggregate: str = MEAN) -> Estimate | None:
    """Mean (or IQM) and interval (analysis.intervals, cut at 0) of one cost over the seeds that reached the
    target (and have the cost)."""
    values = [v for v in (COSTS[cost][1](r) for r in found if r is not None) if v is not None]
    return estimate(values, aggregate, (0.0, None))


def _scaled(est: Estimate | None, scale: float) -> Estimate | None:
    return None if est is None else est.scaled(scale)


def reached_label(found: Sequence[Reach | None]) -> str:
    """'2/3 reached': the seeds that reached the target out of the finished ones."""
    return f"{sum(r is not None for r in found)}/{len(found)} reached"


def target_markdown(study: Study, target: Target, aggregate: str = MEAN) -> str:
    """The time-to-target section of report.md: a row per arm, the seeds that reached the target, then the mean
    (or IQM) of each cost over them with its interval and n (analysis.intervals.cell)."""
    header = [*study.group_axes, "runs", "reached", *(label for label, _, _ in COSTS.values())]
    rows = []
    for group in study.groups:
        found = reaches(group, target)
        rows.append([*group.axes.values(), group.status, reached_label(found),
                     *[cell(_scaled(cost_interval(found, c, aggregate), scale)) for c, (_, _, scale) in COSTS.items()]])
    direction = "lower is better: the first evaluation at or below" if target.lower else \
        "the first evaluation at or above"
    return "\n".join([
        f"## Time to target: {target.label}", "",
        f"Per finished seed, {direction} {target.value:g} (no interpolation): its simulated time, round and the "
        f"bytes one peer sent up to it. {note(aggregate, study.seed_word + ' that reached the target', 'cut at 0')}; "
        "a seed that never reaches it is counted in `reached`, not averaged in (– where none did, or where the "
        "runs have no simulated clock).", "",
        _md_table(header, rows), ""])


def target_columns(target: Target, aggregate: str = MEAN) -> list[tuple[str, Callable[[Group], object]]]:
    """table.csv's time-to-target columns: the target, seeds reached and finished, then per cost its mean (or
    IQM), low, high, n and interval over the seeds that reached it (analysis.intervals.csv_columns; bytes in
    bytes)."""
    def interval_part(cost: str, i: int) -> Callable[[Group], object]:
        def column(group: Group) -> object:
            return csv_cells(cost_interval(reaches(group, target), cost, aggregate))[i]
        return column

    columns: list[tuple[str, Callable[[Group], object]]] = [
        ("target", lambda g: target.label),
        ("target_reached", lambda g: sum(r is not None for r in reaches(g, target))),
        ("target_seeds", lambda g: len(reaches(g, target)))]
    for cost in COSTS:
        columns += [(name, interval_part(cost, i)) for i, name in enumerate(csv_columns(f"target_{cost}", aggregate))]
    return columns
