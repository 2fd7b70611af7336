"""Time to target: per arm of a study, when its seeds first reach a metric's target value.

    python -m analysis.report STUDY_DIR --metric M --target VALUE [--direction higher|lower]

Per finished seed, the first evaluation (in file order, no interpolation) whose metric is >= VALUE, or <= VALUE
for a metric where lower is better (`metric_lower_is_better`, or --direction), gives three costs: the simulated
seconds of that evaluation (runs with the simulated clock), its round (for --mode async, the index of its batch
of events) and the bytes one peer sent up to it. Each arm reports the mean of each cost over the seeds that
reached the target, with its 95% Student-t interval (analysis.study.mean_ci), and how many of its finished seeds
did ("2/3 reached"); a seed that never reaches the target is counted, not averaged in.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from p2pfl.records import SIM_TIME

from .runs import ROUND, Run, cumulative_bytes_per_peer, is_number
from .study import Group, Interval, Study, _fmt_interval, _md_table, _num, mean_ci

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


def cost_interval(found: Sequence[Reach | None], cost: str) -> Interval | None:
    """Mean and 95% interval of one cost over the seeds that reached the target (and have the cost)."""
    values = [v for v in (COSTS[cost][1](r) for r in found if r is not None) if v is not None]
    return mean_ci(values)


def _scaled(iv: Interval | None, scale: float) -> Interval | None:
    if iv is None:
        return None
    return Interval(iv.mean * scale, iv.n, None if iv.low is None else iv.low * scale,
                    None if iv.high is None else iv.high * scale)


def reached_label(found: Sequence[Reach | None]) -> str:
    """'2/3 reached': the seeds that reached the target out of the finished ones."""
    return f"{sum(r is not None for r in found)}/{len(found)} reached"


def target_markdown(study: Study, target: Target) -> str:
    """The time-to-target section of report.md: a row per arm, the seeds that reached the target, then the mean
    ± 95% CI half-width of each cost over them."""
    header = [*study.group_axes, "runs", "reached", *(label for label, _, _ in COSTS.values())]
    rows = []
    for group in study.groups:
        found = reaches(group, target)
        rows.append([*group.axes.values(), group.status, reached_label(found),
                     *[_fmt_interval(_scaled(cost_interval(found, c), scale)) for c, (_, _, scale) in COSTS.items()]])
    direction = "lower is better: the first evaluation at or below" if target.lower else \
        "the first evaluation at or above"
    return "\n".join([
        f"## Time to target: {target.label}", "",
        f"Per finished seed, {direction} {target.value:g} (no interpolation): its simulated time, round and the "
        f"bytes one peer sent up to it. Cells: mean over the {study.seed_word} that reached the target ± "
        "half-width of the 95% Student-t interval; a seed that never reaches it is counted in `reached`, not "
        "averaged in (– where none did, or where the runs have no simulated clock).", "",
        _md_table(header, rows), ""])


def target_columns(target: Target) -> list[tuple[str, Callable[[Group], object]]]:
    """table.csv's time-to-target columns: the target, seeds reached and finished, then per cost its mean,
    ci_low and ci_high over the seeds that reached it (bytes in bytes)."""
    def interval_part(cost: str, part: str) -> Callable[[Group], object]:
        def cell(group: Group) -> object:
            iv = cost_interval(reaches(group, target), cost)
            return _num(getattr(iv, part)) if iv is not None else ""
        return cell

    columns: list[tuple[str, Callable[[Group], object]]] = [
        ("target", lambda g: target.label),
        ("target_reached", lambda g: sum(r is not None for r in reaches(g, target))),
        ("target_seeds", lambda g: len(reaches(g, target)))]
    for cost in COSTS:
        columns += [(f"target_{cost}_{col}", interval_part(cost, part))
                    for col, part in (("mean", "mean"), ("ci_low", "low"), ("ci_high", "high"))]
    return columns
