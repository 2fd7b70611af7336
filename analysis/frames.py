"""Run folders and study folders as two tidy pandas DataFrames, for notebooks and for the study tables.

    frames = analysis.frame(["studies/topology", "runs/2026-...-consensus-cycle"])
    frames = analysis.frame("runs/")   # every run and study folder in a folder
    frames.records   # one row per recorded value: study, run, <axes>, seed, round, kind, metric, base, model,
                     # statistic, peer, value
    frames.runs      # one row per run: study, run, <axes>, seed, state, algorithm, topology, peers, rounds,
                     # rounds_done, wall_s, one column per final eval metric, then the configuration (lr, ...)

`records` reads every metrics.jsonl record by analysis.tidy's rule (a per-peer value has its `peer`; a
summarised record's statistics over peers are `<name>_stats.<field>` rows), and names each value's metric, model
and statistic in `base`, `model` and `statistic` (analysis.tidy.metric_parts): the peers' own values are the rows
with model "peer" and no statistic, so a groupby over them does not count the `_peer_*` statistics again.

A study folder gives one row per point of its plan in `runs` (missing and failed points too, with their `state`)
and its labels as one column per axis, as numbers where every label of the axis is one (so a numeric axis sorts
and plots as numbers), else as text; a lone run folder has none (NaN) and `study` None. The `seed` column is the
run's seed (config.yaml; the plan's options for a point never started), so the study's seed axis is no column of
its own; an axis named like a column here is the column `axis_<name>`, and an axis named algorithm, topology,
peers or rounds holds the study's labels in that column. After the final metrics come the run's options as
config.yaml records them (the plan's options for a point never started): one column each (`lr`, `dataset`,
`partition`, `alpha`, ...; a nested mapping's keys joined by "."; lists left out), unless a column of that name
came before. Runs still in progress are read as far as they got: their records so far, `state` "unfinished", and
no final metrics (NaN): those are the finished runs' last evaluation (else summary.json's `final`), as recorded,
non-finite values included.

A folder that is neither a run nor a study is read as a folder of them: each sub-folder that is a run or a study,
in name order; any other sub-folder (or one that cannot be read) is skipped with one warning naming it.
"""
from __future__ import annotations

import dataclasses
import os
import re
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from .runs import Run, RunFolderError, load_run
from .study import DONE, SEED_AXIS, Study, StudyFolderError, is_study, load_study
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
    axes: dict[str, Any]
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


def _is_run(path: Path) -> bool:
    return (path / "config.yaml").is_file()


def _sources(path: Path) -> list[_Source]:
    """A study folder's points, one run folder, or those of a folder of runs and studies (the rest skipped, with a
    warning each)."""
    if is_study(path):
        return _study_sources(load_study(path))
    if path.is_dir() and not _is_run(path):
        found = []
        for child in sorted(p for p in path.iterdir() if p.is_dir()):
            try:
                if not (is_study(child) or _is_run(child)):
                    raise RunFolderError("neither a run folder (config.yaml) nor a study folder (plan.json)")
                found += _sources(child)
            except (RunFolderError, StudyFolderError) as exc:
                warnings.warn(f"analysis.frame: skipped {child}: {exc}", stacklevel=3)
        return found
    run = load_run(path)
    return [_Source(None, run.name, {}, run.state, run, {})]


_NUMBER = re.compile(r"[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|inf|nan)", re.IGNORECASE)


def _as_number(label: str) -> int | float:
    return int(label) if re.fullmatch(r"[+-]?\d+", label) else float(label)


def _numeric_axes(sources: list[_Source], axes: list[str]) -> list[_Source]:
    """The sources with each axis whose every label is a number (3, 0.5, 1e-3) holding numbers instead of text."""
    numeric = [a for a in axes if all(isinstance(s.axes[a], str) and _NUMBER.fullmatch(s.axes[a].strip())
                                      for s in sources if s.axes.get(a) is not None)]
    return [dataclasses.replace(s, axes={a: _as_number(v.strip()) if a in numeric and v is not None else v
                                         for a, v in s.axes.items()}) for s in sources]


def flat_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A run's options as one level: a nested mapping's keys joined by "."; lists (sets of peers, plug-ins) left
    out, as a cell holds one value."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            out.update(flat_config(value, f"{prefix}{key}."))
        elif not isinstance(value, (list, tuple)):
            out[f"{prefix}{key}"] = value
    return out


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
    row.update({k: v for k, v in _finals(source).items() if k not in row})
    return {**row, **{k: v for k, v in flat_config(config).items() if k not in row}}


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
    study, one with config.yaml a run, any other folder a folder of them). Raises analysis.RunFolderError /
    analysis.study.StudyFolderError for a given run or study that cannot be read, or a path that is no folder."""
    given = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    sources = [s for path in given for s in _sources(Path(path))]
    axes = _axes(sources)
    sources = _numeric_axes(sources, axes)
    return Frames(records=_records_table(sources, axes), runs=_runs_table(sources, axes))


def study_runs(study: Study) -> pd.DataFrame:
    """`Frames.runs` of a study already read (analysis.study.load_study): one row per point, in plan order, its
    axes as the plan's labels (text: what analysis.shift matches a reference label against)."""
    sources = _study_sources(study)
    return _runs_table(sources, _axes(sources))
