"""Run folders and study folders as two tidy pandas DataFrames, for notebooks and for the study tables.

    frames = analysis.frame(["studies/topology", "runs/2026-...-consensus-cycle"])
    frames.records   # one row per recorded value: study, run, <axes>, seed, round, kind, metric, peer, value
    frames.runs      # one row per run: study, run, <axes>, seed, state, algorithm, topology, peers, rounds,
                     # rounds_done, wall_s, then one column per final eval metric

`records` reads every metrics.jsonl record by analysis.tidy's rule (a per-peer value has its `peer`; a
summarised record's statistics over peers are `<name>_stats.<field>` rows). A study folder gives one row per
point of its plan in `runs` (missing and failed points too, with their `state`) and its labels as one column per
axis; a lone run folder has none (NaN) and `study` None. The `seed` column is the run's seed (config.yaml; the
plan's options for a point never started), so the study's seed axis is no column of its own; an axis named like
a column here is the column `axis_<name>`, and an axis named algorithm, topology, peers or rounds holds the
study's labels (strings) in that column. Runs still in progress are read as far as they got: their records so
far, `state` "unfinished", and no final metrics (NaN): those are the finished runs' last evaluation (else
summary.json's `final`), as recorded, non-finite values included.
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from .runs import Run, load_run
from .study import DONE, SEED_AXIS, Study, is_study, load_study
from .tidy import COLUMNS, records_table

__all__ = ["Frames", "frame", "study_runs", "axis_column", "RUN_COLUMNS"]

#: The columns of `runs` before the final metrics (the axes come after `run`).
RUN_COLUMNS = ("study", "run", "seed", "state", "algorithm", "topology", "peers", "rounds", "rounds_done", "wall_s")
#: What the runs' config.yaml gives `runs` (unless an axis of the same name gives its labels).
CONFIG_COLUMNS = ("algorithm", "topology", "peers", "rounds")
_RESERVED = frozenset({*RUN_COLUMNS, *COLUMNS} - set(CONFIG_COLUMNS))


@dataclass(frozen=True)
class Frames:
    """The records (one row per value) and the runs (one row per run, its final metrics) of some folders."""

    records: pd.DataFrame
    runs: pd.DataFrame


@dataclass(frozen=True)
class _Source:
    """One run as the frames see it: where it belongs, its labels, its folder (None: never started)."""

    study: str | None
    name: str
    axes: dict[str, str]
    state: str
    run: Run | None
    options: dict[str, Any]


def axis_column(axis: str) -> str:
    """The column of a study axis's labels (`axis_<name>` for an axis named like one of the fixed columns)."""
    return f"axis_{axis}" if axis in _RESERVED else axis


def _study_sources(study: Study) -> list[_Source]:
    """A study's points in plan order."""
    return [_Source(study.name, p.name, {axis_column(a): v for a, v in p.axes.items() if a != SEED_AXIS}, p.state,
                    p.run, p.options) for p in study.points]


def _sources(path: str | os.PathLike) -> list[_Source]:
    """A study folder's points, or one run folder."""
    if is_study(path):
        return _study_sources(load_study(path))
    run = load_run(path)
    return [_Source(None, run.name, {}, run.state, run, {})]


def _finals(source: _Source) -> dict[str, Any]:
    """The final eval metrics of a finished run, as recorded (the last eval record, else summary.final)."""
    if source.state != DONE or source.run is None:
        return {}
    return source.run.final_metrics() or dict((source.run.summary or {}).get("final") or {})


def _axes(sources: list[_Source]) -> list[str]:
    """The axis columns of some sources, in order of first appearance."""
    return list(dict.fromkeys(a for s in sources for a in s.axes))


def _wall_s(run: Run) -> float | None:
    """summary.json's wall time, else the last round's elapsed time (a run in progress); None when neither says."""
    if run.summary is not None:
        return run.summary.get("wall_s")
    return run.rounds[-1].get("elapsed_s") if run.rounds else None


def _run_row(source: _Source) -> dict[str, Any]:
    run = source.run
    config = run.config if run is not None else source.options
    row: dict[str, Any] = {"study": source.study, "run": source.name, **source.axes, "seed": config.get("seed"),
                           "state": source.state}
    row.update({key: config.get(key) for key in CONFIG_COLUMNS if key not in row})
    row.update(rounds_done=run.rounds_done if run is not None else None,
               wall_s=_wall_s(run) if run is not None else None)
    return {**row, **{k: v for k, v in _finals(source).items() if k not in row}}


def _runs_table(sources: list[_Source], axes: list[str]) -> pd.DataFrame:
    leading = list(dict.fromkeys(["study", "run", *axes, *RUN_COLUMNS[2:]]))
    table = pd.DataFrame([_run_row(s) for s in sources])
    table = table.reindex(columns=[*leading, *[c for c in table.columns if c not in leading]])
    return table.astype({"seed": "Int64", "rounds_done": "Int64", "wall_s": "float64"})


def _records_table(sources: list[_Source], axes: list[str]) -> pd.DataFrame:
    columns = ["study", "run", *axes, "seed", *COLUMNS]
    parts = []
    for source in sources:
        if source.run is None:
            continue
        part = source.run.frame()
        labels = {"study": source.study, "run": source.name, **{a: source.axes.get(a) for a in axes},
                  "seed": source.run.config.get("seed")}
        parts.append(part.assign(**labels)[columns])
    table = pd.concat(parts, ignore_index=True) if parts else records_table([], columns)
    return table.astype({"seed": "Int64"})


def frame(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> Frames:
    """`Frames` of run folders and study folders (one path or several, in order; a folder with plan.json is a
    study). Raises analysis.RunFolderError / analysis.study.StudyFolderError for a path that is neither."""
    given = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    sources = [s for path in given for s in _sources(Path(path))]
    axes = _axes(sources)
    return Frames(records=_records_table(sources, axes), runs=_runs_table(sources, axes))


def study_runs(study: Study) -> pd.DataFrame:
    """`Frames.runs` of a study already read (analysis.study.load_study): one row per point, in plan order."""
    sources = _study_sources(study)
    return _runs_table(sources, _axes(sources))
