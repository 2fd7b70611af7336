"""Tuned arms: a study's `tune` section, its tuning points, and the choice each arm's final runs are made with.

    tune:
      grid: {lr: [0.01, 0.03, 0.1, 0.3]}   # options searched, a full grid, for every arm
      seeds: [100]                         # tuning seeds (never a final run's seed)
      validation: 0.1                      # the tuning runs' --validation: the share of training data held out
      metric: test_acc_avg                 # read from each tuning run's summary (scored on the held-out split)
      goal: max                            # max or min
      per: [scheme, data]                  # the axes whose every combination is tuned on its own
                                           # (default: every axis but seed)
    axes:
      scheme:
        - {label: qgm-ring, gossip: qgm, tune: {momentum: [0.5, 0.9]}}   # an arm's own grid, over the study's

An arm is one combination of the `per` axes' labels. Its tuning points are every grid value x tuning seed x each
of its final points' settings of the other axes (seed aside), each run with --validation, so it is scored on images
held out of the training data and never reads the test set (p2pfl.data.validation). A candidate's score is the mean
of the metric over its tuning points; a tuning point whose run diverged (a missing or non-finite metric) scores the
worst possible, so a diverging value is never chosen. The choice is the candidate with the best score (argmax, or
argmin under goal: min), ties going to the first in grid order (the grid's values in the order written, the last
option varying fastest). Every final point of the arm then runs with the chosen values. The choice is written to
STUDY/tuning.json (the grid, every tuning run's score, the candidates' scores, the choice) and STUDY/tuning.csv.
"""
from __future__ import annotations

import csv
import io
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from p2pfl.runtime.files import loads, write_atomic
from p2pfl.suggest import hint, option_hint

SEED = "seed"
TUNE_PREFIX = "tune"
GOALS = ("max", "min")
KEYS = ("grid", "seeds", "validation", "metric", "goal", "per")


class TuneError(ValueError):
    """A tune section that cannot be used, or a choice that cannot be made yet (one line)."""


@dataclass(frozen=True)
class TuneSpec:
    """A study's tune section, checked."""

    grid: dict[str, list[Any]]
    seeds: list[int]
    validation: float
    metric: str
    goal: str
    per: list[str] | None  # None: every axis but seed

    def to_dict(self) -> dict[str, Any]:
        return {"grid": self.grid, "seeds": self.seeds, "validation": self.validation, "metric": self.metric,
                "goal": self.goal, "per": self.per}


def grid(value: Any, where: str, known: frozenset[str]) -> dict[str, list[Any]]:
    """A mapping option -> non-empty list of values, its options known to p2pfl.run."""
    if not isinstance(value, dict):
        raise TuneError(f"{where}: must map options to lists of values, e.g. {{lr: [0.01, 0.1]}}")
    out = {}
    for key, values in value.items():
        name = str(key).replace("-", "_")
        if name not in known:
            raise TuneError(f"{where}.{key}: not a p2pfl.run option{option_hint(name, known)} (see python -m p2pfl.run "
                            "--help)")
        if name in (SEED, "validation"):
            raise TuneError(f"{where}.{key}: the tuner sets {name} itself (tune.seeds, tune.validation)")
        if not isinstance(values, list) or not values or len({value_label(v) for v in values}) != len(values):
            raise TuneError(f"{where}.{key}: must be a non-empty list of distinct values")
        out[name] = values
    return out


def parse(data: Any, known: frozenset[str]) -> TuneSpec:
    """The tune section `data` checked against p2pfl.run's options `known`; TuneError names the key at fault."""
    if not isinstance(data, dict):
        raise TuneError("tune: must be a mapping (grid, seeds, validation, metric, goal, per)")
    unknown = sorted(set(map(str, data)) - set(KEYS))
    if unknown:
        raise TuneError(f"tune.{unknown[0]}: unknown key{hint(unknown[0], KEYS)} (allowed: {', '.join(KEYS)})")
    grid_ = grid(data.get("grid", {}), "tune.grid", known)
    seeds = data.get("seeds", [100])
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        seeds = [seeds]
    if (not isinstance(seeds, list) or not seeds or len(set(seeds)) != len(seeds)
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)):
        raise TuneError(f"tune.seeds: a list of distinct seeds >= 0, got {seeds!r}")
    validation = data.get("validation", 0.1)
    if not isinstance(validation, (int, float)) or isinstance(validation, bool) or not 0 < validation <= 0.5:
        raise TuneError(f"tune.validation: the share of training data held out, in (0, 0.5], got {validation!r}")
    metric = data.get("metric", "test_acc_avg")
    if not isinstance(metric, str) or not metric:
        raise TuneError(f"tune.metric: the name of a final metric (e.g. test_acc_avg), got {metric!r}")
    goal = data.get("goal", "max")
    if goal not in GOALS:
        raise TuneError(f"tune.goal: max or min, got {goal!r}")
    per = data.get("per")
    if per is not None and (not isinstance(per, list) or not per or not all(isinstance(a, str) for a in per)
                            or len(set(per)) != len(per)):
        raise TuneError("tune.per: a non-empty list of distinct axes of the study")
    return TuneSpec(grid=grid_, seeds=list(seeds), validation=float(validation), metric=metric, goal=goal, per=per)


def arm_axes(spec: TuneSpec, axes: list[str]) -> list[str]:
    """The axes that make an arm, in the study's axis order: tune.per, else every axis but seed."""
    return [a for a in axes if a != SEED and (spec.per is None or a in spec.per)]


def arm_of(labels: dict[str, str], per: list[str]) -> tuple[tuple[str, str], ...]:
    """The arm a point belongs to: its labels on the `per` axes."""
    return tuple((a, labels[a]) for a in per if a in labels)


def arm_name(arm: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"{a}={lab}" for a, lab in arm) or "(all)"


def candidates(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid, in grid order (the last option varying fastest)."""
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


def value_label(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


@dataclass(frozen=True)
class TuningRun:
    """One tuning point: the arm, the candidate's values, the seed and the other axes' labels it ran with."""

    name: str
    arm: tuple[tuple[str, str], ...]
    values: dict[str, Any]
    seed: int
    context: dict[str, str]


def score_of(run_dir: Path, metric: str) -> tuple[float | None, str | None]:
    """(score, None) of a finished tuning run, (None, why) when it has none: a run scored on the test set is
    refused (TuneError), since a choice must never read it."""
    summary, manifest = run_dir / "summary.json", run_dir / "manifest.json"
    try:
        record = loads(summary.read_text())
        scored_on = loads(manifest.read_text()).get("dataset", {}).get("scored_on")
    except (OSError, ValueError):
        return None, "no readable summary.json / manifest.json"
    if scored_on != "validation":
        raise TuneError(f"{run_dir}: scored on {scored_on or 'no held-out split'}, not a validation split; a tuning "
                        "run must run with --validation")
    final = record.get("final") or {}
    if metric not in final:  # a name no run reports (a typo), not a divergence
        raise TuneError(f"tune.metric: {run_dir.name} reports no final {metric} (it reports: "
                        f"{', '.join(sorted(final)) or 'none'})")
    value = final[metric]
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return None, f"{metric} is {value!r} (diverged)"
    return float(value), None


def choose(spec: TuneSpec, runs: list[TuningRun], scores: dict[str, tuple[float | None, str | None]],
           grids: dict[tuple[tuple[str, str], ...], dict[str, list[Any]]]) -> dict[str, Any]:
    """The selection record (tuning.json): per arm, every candidate's runs and mean score, and the choice. A run
    without a score counts as the worst possible value (module docstring)."""
    worst = -math.inf if spec.goal == "max" else math.inf
    arms = []
    for arm, grid in grids.items():
        rows = []
        for values in candidates(grid):
            mine = [r for r in runs if r.arm == arm and r.values == values]
            results = [{"point": r.name, "seed": r.seed, "context": r.context, "score": scores[r.name][0],
                        "note": scores[r.name][1]} for r in mine]
            got = [x["score"] for x in results]
            mean = worst if not got or any(v is None for v in got) else sum(got) / len(got)
            rows.append({"values": values, "score": None if math.isinf(mean) else mean, "runs": results,
                         "_key": mean})
        if all(math.isinf(r["_key"]) for r in rows):
            raise TuneError(f"arm {arm_name(arm)}: no candidate has a finite {spec.metric} in every tuning run "
                            "(every one diverged): widen the grid towards smaller steps")
        pick = max(rows, key=lambda r: r["_key"]) if spec.goal == "max" else min(rows, key=lambda r: r["_key"])
        best = rows.index(pick)  # max/min return the first of equal keys: ties go to grid order
        for row in rows:
            row.pop("_key")
        arms.append({"arm": dict(arm), "grid": grid, "chosen": rows[best]["values"], "score": rows[best]["score"],
                     "candidates": rows})
    return {**spec.to_dict(), "rule": f"arg{spec.goal} over each arm's candidates of the mean {spec.metric} of its "
                                      f"tuning runs (seeds {spec.seeds}, --validation {spec.validation}); a run "
                                      "without a finite score counts as the worst; ties to the first in grid order",
            "arms": arms}


def selection_csv(selection: dict[str, Any]) -> str:
    """tuning.csv: one row per tuning run (its arm, values, seed, other axes, score, whether chosen)."""
    out = io.StringIO()
    axes = list(dict.fromkeys(a for arm in selection["arms"] for a in arm["arm"]))
    options = list(dict.fromkeys(k for arm in selection["arms"] for k in arm["grid"]))
    contexts = list(dict.fromkeys(k for arm in selection["arms"] for row in arm["candidates"]
                                  for run in row["runs"] for k in run["context"]))
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*axes, *options, SEED, *contexts, "point", selection["metric"], "candidate_score", "chosen"])
    for arm in selection["arms"]:
        for row in arm["candidates"]:
            chosen = row["values"] == arm["chosen"]
            for run in row["runs"]:
                writer.writerow([*(arm["arm"].get(a, "") for a in axes), *(row["values"].get(k, "") for k in options),
                                 run["seed"], *(run["context"].get(k, "") for k in contexts), run["point"],
                                 "" if run["score"] is None else repr(run["score"]),
                                 "" if row["score"] is None else repr(row["score"]), int(chosen)])
    return out.getvalue()


def write_selection(path: Path, selection: dict[str, Any]) -> None:
    """tuning.json and tuning.csv in the study folder `path`, each replaced atomically."""
    write_atomic(path / "tuning.json", json.dumps(selection, indent=1))
    write_atomic(path / "tuning.csv", selection_csv(selection))


__all__ = ["GOALS", "TUNE_PREFIX", "TuneError", "TuneSpec", "TuningRun", "arm_axes", "arm_name", "arm_of",
           "candidates", "choose", "grid", "parse", "score_of", "selection_csv", "value_label", "write_selection"]
