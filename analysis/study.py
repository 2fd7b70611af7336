"""The report of a study: many runs of ``python -m p2pfl.run`` over a grid of options x seeds.

    python -m analysis.report STUDY_DIR [--out REPORT_DIR] [--no-plots] [--metric NAME] [--target VALUE]

A study folder (written by p2pfl.study) holds ``plan.json`` ({"name", "axes": [axis, ...], "points": [{"name",
"axes": {axis: label}, "options"}, ...]}), one run folder per point in ``runs/NAME/`` (``summary.json`` once
finished) and, from the local runner, ``logs/NAME.log`` and ``logs/NAME.rc`` (output and exit status).

Points are grouped by every axis except ``seed``; per group and final eval metric the report gives the mean (or,
with --aggregate iqm, the interquartile mean) over the finished seeds and an interval that says what it is
(analysis.intervals): the min–max at n = 2, a 95% confidence interval from n = 3 on, none at n = 1. A metric with
one value in every finished run leaves the Markdown table for a note under it (table.csv keeps it). A
group with missing, failed or unfinished points says so in every table: it is never dropped. The report goes into
``STUDY_DIR/report/``: ``report.md``, ``table.csv`` and the figures of ``analysis.study_plots`` (written by
``analysis.report.write_study_report``); with --target, each group's time to reach it (analysis.target).
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from p2pfl.records import AVG, PEER_MAX, PEER_MEAN, PEER_MIN
from p2pfl.study.folder import StudyFolder
from topologies.measures import N_EFF_GAMMA, Matrix, expected_contraction, n_eff, p_worst
from topologies.stats import CLOSED_FORM, second_eigenvalue_modulus, sparse_mixing_of

from .intervals import MEAN, Estimate, cell, csv_cells, csv_columns, estimate, note
from .labels import metric_range
from .runs import Run, RunFolderError, is_number, load_run

__all__ = [
    "Group", "Interval", "Point", "Study", "StudyFolderError", "build_study_markdown", "constant_metrics",
    "groups_markdown", "MEASURES", "headline_metric", "is_study", "lead_sentence", "ordered_metrics",
    "report_metrics", "load_point", "load_study", "mean_ci", "spectral_gap",
    "study_table_csv", "t_quantile", "topology_measures",
]

PLAN = "plan.json"
SEED_AXIS = "seed"
CONFIDENCE = 0.95
#: Point states: finished (summary.json), failed (non-zero exit status, or a run folder that cannot be read),
#: started but not finished (no summary, no exit status), never started.
DONE, FAILED, UNFINISHED, MISSING = "done", "failed", "unfinished", "missing"
#: The report's headline metric (its lead sentence, the first columns, the figures' default): the peers' own models
#: first (their mean), the network average (``_avg``, the average of every peer's model: a model no peer holds)
#: only where the peers were not scored at every evaluation (``headline_metric``); else the first metric with "acc".
HEADLINE_METRICS = ("test_acc_peer_mean", "knn_acc_peer_mean", "probe_acc_peer_mean", "task_metric_peer_mean",
                    "test_acc_avg", "knn_acc_avg", "probe_acc_avg")
#: The order of one quantity's columns: the peers' mean, the worst peer, the network average beside them, then the
#: best peer, the untrained model and the rest (``ordered_metrics``).
ROLE_ORDER = ("peer_mean", "worst", "avg", "best", "untrained", "value")


class StudyFolderError(ValueError):
    """A path given as a study folder is not one, or its plan.json cannot be read."""


# ----- statistics -------------------------------------------------------------------------------------------------
def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with df degrees of freedom (scipy.stats, imported only when needed)."""
    from scipy.stats import t

    return float(t.ppf(p, df))


@dataclass(frozen=True)
class Interval:
    """Mean of n values and its confidence interval; low/high are None when n = 1 (no spread to estimate)."""

    mean: float
    n: int
    low: float | None = None
    high: float | None = None

    @property
    def half_width(self) -> float | None:
        return None if self.high is None else self.high - self.mean


def mean_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval | None:
    """Mean ± t_{(1+c)/2, n−1}·s/√n (s: the sample standard deviation); None for no values."""
    xs = np.asarray(values, dtype=float)
    n = xs.size
    if n == 0:
        return None
    mean = float(xs.mean())
    if n == 1:
        return Interval(mean, 1)
    half = t_quantile((1 + confidence) / 2, n - 1) * float(xs.std(ddof=1)) / math.sqrt(n)
    return Interval(mean, n, mean - half, mean + half)


def spectral_gap(mixing: Sequence[Sequence[float]] | Matrix) -> float:
    """1 − |λ2(W)| of a mixing matrix (dense or scipy.sparse): how fast gossip over it reaches consensus
    (topologies.stats)."""
    return 1.0 - second_eigenvalue_modulus(mixing if sp.issparse(mixing) else np.asarray(mixing, dtype=float))


#: The topology measures of the groups table, table.csv and the measures figure (SPEC §10; defined in
#: p2pfl.network.mixing_measures): key -> label naming its definition, one definition per key on every row.
MEASURES = {"spectral_gap": "spectral gap 1 − |λ2(E[W])|",
            "p": "p = 1 − λmax E[(W−J)ᵀ(W−J)] (worst case)",
            "p_mean": "p_mean = 1 − mean contraction on random X",
            "n_eff": "n_eff(γ) of E[W]"}


def old_estimate(topology: dict[str, Any]) -> bool:
    """Whether a manifest topology record predates stats["mixing"] and holds a changing network's random-X estimate
    of p (old `p_source`): its spectral gap, p and n_eff cannot be recomputed from the folder, only p_mean read."""
    stats = topology.get("stats") or {}
    return "mixing" not in stats and stats.get("p_source", CLOSED_FORM) != CLOSED_FORM


def topology_measures(topology: dict[str, Any]) -> dict[str, float | None]:
    """A manifest topology record's MEASURES, from its stats["mixing"] (p2pfl.network.mixing_measures). A record
    written before it: one whose p is the closed form (a static network, nothing drawn) gets all four from its W by
    the same definitions, exact (what its stats already hold is reused: the same functions of the same W; n_eff at
    its γ, else the default); one holding a changing network's random-X estimate (`old_estimate`) gets that as
    p_mean, and None for the rest. W is read sparse (topologies.stats.sparse_mixing_of), from either record form."""
    stats = topology.get("stats") or {}
    if "mixing" in stats:
        return {m: stats["mixing"].get(m) for m in MEASURES}
    if old_estimate(topology):
        return {"spectral_gap": None, "p": None, "p_mean": stats.get("p"), "n_eff": None}
    w = sparse_mixing_of(topology)
    return {"spectral_gap": spectral_gap(w),
            "p": stats["p_worst"] if "p_worst" in stats else stats["p"] if "p" in stats else p_worst(w),
            "p_mean": 1.0 - expected_contraction(w),
            "n_eff": stats["n_eff"] if "n_eff" in stats else n_eff(w, stats.get("n_eff_gamma", N_EFF_GAMMA))}


# ----- the study folder -------------------------------------------------------------------------------------------
@dataclass
class Point:
    """One point of the plan: its axis labels and options, its state, its run (when the folder is readable) and,
    for a failed point, the error line."""

    name: str
    axes: dict[str, str]
    options: dict[str, Any]
    state: str
    run: Run | None = None
    error: str | None = None
    log: Path | None = None

    def final_metrics(self) -> dict[str, float]:
        """The finite numeric final eval metrics of a finished run (the last eval record, else summary.final)."""
        if self.state != DONE or self.run is None:
            return {}
        final = self.run.final_metrics() or dict((self.run.summary or {}).get("final") or {})
        return {k: float(v) for k, v in final.items() if is_number(v) and math.isfinite(float(v))}


def load_point(root: Path, entry: dict[str, Any]) -> Point:
    """A plan entry with its state as the study runner sees it (p2pfl.study.folder: summary.json done, an exit
    status other than 0 and 75 failed, ...); a point never started is missing, one started and not finished
    (running, preempted or stopped) unfinished, a done one whose run folder cannot be read failed."""
    name = str(entry["name"])
    folder = StudyFolder(root)
    seen = folder.state(name)
    run, error = None, seen.error
    if folder.run_dir(name).is_dir():
        try:
            run = load_run(folder.run_dir(name))
        except RunFolderError as exc:
            error = error or str(exc)
    if seen.state == "done" and run is not None and run.summary is not None:
        state = DONE
    elif seen.state == "failed" or seen.state == "done":
        state = FAILED
    else:
        state = UNFINISHED if run is not None or seen.state != "pending" else MISSING
    log = folder.log(name)
    axes = {str(k): str(v) for k, v in (entry.get("axes") or {}).items()}
    return Point(name, axes, dict(entry.get("options") or {}), state, run, error, log if log.is_file() else None)


@dataclass
class Group:
    """The points that differ only by seed; ``axes`` are their labels on the other axes."""

    axes: dict[str, str]
    points: list[Point] = field(default_factory=list)
    seed_word: str = "seeds"

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.axes.items()) or "all"

    @property
    def done(self) -> list[Point]:
        return [p for p in self.points if p.state == DONE]

    @property
    def n_done(self) -> int:
        return len(self.done)

    @property
    def n_expected(self) -> int:
        return len(self.points)

    @property
    def status(self) -> str:
        """'2/3 seeds; 1 failed: <error line>; ...': what is finished and what is not, and why."""
        parts = [f"{self.n_done}/{self.n_expected} {self.seed_word}"]
        for state in (FAILED, UNFINISHED, MISSING):
            points = [p for p in self.points if p.state == state]
            if points:
                errors = list(dict.fromkeys(p.error for p in points if p.error))
                parts.append(f"{len(points)} {state}" + (": " + " / ".join(errors) if errors else ""))
        return "; ".join(parts)

    def values(self, metric: str) -> list[float]:
        """A final metric's values over the finished seeds that report it."""
        return [m[metric] for m in (p.final_metrics() for p in self.done) if metric in m]

    def interval(self, metric: str) -> Interval | None:
        """Mean and 95% Student-t CI of a final metric over the finished seeds, at any n >= 2 (a reference for the
        tests; every table and figure uses ``estimate``, which gives no t-interval below 3 seeds); None when no
        finished run has it."""
        return mean_ci(self.values(metric))

    def estimate(self, metric: str, aggregate: str = MEAN) -> Estimate | None:
        """A final metric's mean (or IQM) over the finished seeds with the interval of analysis.intervals (min–max
        at n = 2), cut to the metric's range; None when no finished run has it."""
        return estimate(self.values(metric), aggregate, metric_range(metric))

    def measure(self, name: str) -> float | None:
        """Mean of a topology measure (MEASURES) over the points' manifests (one per seed: random graphs differ by
        seed); None when no manifest has it (n_eff of a non-symmetric W)."""
        values = [topology_measures(p.run.topology)[name] for p in self.points if p.run is not None and p.run.topology]
        known = [v for v in values if v is not None]
        return sum(known) / len(known) if known else None

    @property
    def spectral_gap(self) -> float | None:
        """Mean spectral gap 1 − |λ2(E[W])| of the runs' networks (MEASURES)."""
        return self.measure("spectral_gap")


@dataclass
class Study:
    """A study folder as read from disk: the plan's points in plan order and their groups (first-seen order)."""

    path: Path
    name: str
    axes: list[str]
    points: list[Point]
    groups: list[Group]

    @property
    def group_axes(self) -> list[str]:
        return [a for a in self.axes if a != SEED_AXIS]

    @property
    def seed_word(self) -> str:
        """What the groups' points are counted as: seeds, or runs when the plan has no seed axis."""
        return "seeds" if SEED_AXIS in self.axes else "runs"

    @property
    def metrics(self) -> list[str]:
        """Every final metric a finished run reports, in order of first appearance."""
        return list(dict.fromkeys(k for p in self.points for k in p.final_metrics()))

    def counts(self) -> dict[str, int]:
        return {state: sum(p.state == state for p in self.points) for state in (DONE, FAILED, UNFINISHED, MISSING)}


def is_study(path: str | os.PathLike) -> bool:
    """Whether a folder is a study folder (it holds plan.json)."""
    return (Path(path) / PLAN).is_file()


def load_study(path: str | os.PathLike) -> Study:
    """Read plan.json and every point's run folder and logs; works while the study is still running."""
    root = Path(path)
    try:
        plan = json.loads((root / PLAN).read_text(encoding="utf-8"))
        axes = [str(a) for a in plan["axes"]]
        points = [load_point(root, e) for e in plan["points"]]
    except (OSError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise StudyFolderError(f"{root / PLAN}: not a study plan ({type(exc).__name__}: {exc})") from exc
    seed_word = "seeds" if SEED_AXIS in axes else "runs"
    groups: dict[tuple[str, ...], Group] = {}
    for point in points:
        labels = {a: point.axes.get(a, "") for a in axes if a != SEED_AXIS}
        groups.setdefault(tuple(labels.values()), Group(labels, seed_word=seed_word)).points.append(point)
    return Study(root, str(plan.get("name") or root.name), axes, points, list(groups.values()))


def evaluations(study: Study, metric: str) -> int:
    """The most evaluation records of one finished run that hold ``metric`` (1: the final evaluation alone)."""
    return max((sum(metric in (r.get("metrics") or {}) for r in p.run.evals) for p in study.points
                if p.state == DONE and p.run is not None), default=0)


def headline_metric(study: Study, prefer: str | None = None) -> str | None:
    """The report's metric (figures, lead sentence, first columns): ``prefer`` if given, else the first of
    HEADLINE_METRICS the runs report (the peers' mean before the network average), else the first with "acc" in
    its name (a peer mean first), else the first. A peers' mean scored at the final evaluation alone (a study run
    with ``peer_scores: final``) gives way to its network average where that was evaluated more often: the figures
    over rounds need the series."""
    if prefer is not None:
        return prefer
    metrics = study.metrics
    for name in HEADLINE_METRICS:
        if name not in metrics:
            continue
        avg = name.removesuffix(PEER_MEAN) + AVG
        if name.endswith(PEER_MEAN) and avg in metrics and evaluations(study, name) < min(2, evaluations(study, avg)):
            continue
        return name
    acc = [m for m in metrics if "acc" in m]
    return next((m for m in acc if m.endswith(PEER_MEAN)), None) or next(iter(acc), metrics[0] if metrics else None)


def worst_peer(base: str) -> str:
    """The suffix of a quantity's worst peer: the lowest (``_peer_min``) where higher is better, the highest
    (``_peer_max``) for a loss, error, distance, drift or shift (analysis.target.metric_lower_is_better)."""
    from .target import metric_lower_is_better  # imports this module

    return PEER_MAX if metric_lower_is_better(base) else PEER_MIN


def _role(name: str) -> tuple[str, str]:
    """(base, role of ROLE_ORDER) of a metric name: the worst and best peer by the quantity's direction."""
    from .metric_panels import split_metric_name

    base, role = split_metric_name(name)
    if role in ("peer_min", "peer_max"):
        role = "worst" if "_" + role == worst_peer(base) else "best"
    return base, role if role in ROLE_ORDER else "value"


def ordered_metrics(metrics: Sequence[str], lead: str | None = None) -> list[str]:
    """``metrics`` with each quantity's columns together, the peers' own models first (ROLE_ORDER: their mean, the
    worst peer, then the network average beside them), the quantities in order of first appearance but ``lead``'s
    (the headline metric's) first."""
    bases = list(dict.fromkeys(_role(m)[0] for m in metrics))
    if lead is not None and _role(lead)[0] in bases:
        bases.remove(_role(lead)[0])
        bases.insert(0, _role(lead)[0])
    return sorted(metrics, key=lambda m: (bases.index(_role(m)[0]), ROLE_ORDER.index(_role(m)[1])))


def report_metrics(study: Study, lead: str | None = None) -> list[str]:
    """The metrics of report.md's table in ``ordered_metrics`` order: each quantity's peers' mean, worst peer and
    network average, the plain metrics, not the best peer (table.csv has it) or bookkeeping constants."""
    return ordered_metrics([m for m in study.metrics if _role(m)[1] != "best"], lead)


def lead_sentence(study: Study, metric: str | None) -> str:
    """report.md's first sentence: what the headline metric is and which model it scores."""
    if metric is None:
        return "No finished run reports a metric yet."
    from .labels import metric_label

    base, role = _role(metric)
    metrics = study.metrics
    worst, avg = base + worst_peer(base), base + AVG
    if role == "peer_mean":
        text = f"Headline: {metric_label(metric)} (`{metric}`)"
        if worst in metrics:
            text += f" and the worst peer (`{worst}`)"
        text += ": each peer's own model, scored as the peer holds it."
        if avg in metrics:
            text += (f" Beside them the network average (`{avg}`): the average of all peers' models, a model no "
                     "peer holds, which is often far better than the peers' own.")
        return text
    if role == "avg":
        peers = base + PEER_MEAN
        if peers not in metrics:
            why = " (the runs did not score the peers' own models: `peer_scores`/`eval_peers`)"
        elif evaluations(study, peers) < min(2, evaluations(study, metric)):
            why = (f" (the peers' own models, `{peers}`, are scored at the final evaluation only: the figures over "
                   "rounds need the series)")
        else:
            why = f"; the peers' own models are in `{peers}` and `{worst}`"
        return (f"Headline: {metric_label(metric)} (`{metric}`): the average of all peers' models, a model no peer "
                f"holds{why}.")
    return f"Headline: {metric_label(metric)} (`{metric}`)."


def unmeasured_groups(study: Study) -> list[Group]:
    """The groups with a run whose old manifest holds only a changing network's random-X p (`old_estimate`): their
    spectral gap, p and n_eff cannot be recomputed from the folder."""
    return [g for g in study.groups
            if any(p.run is not None and p.run.topology and old_estimate(p.run.topology) for p in g.points)]


# ----- the tables -------------------------------------------------------------------------------------------------
def _num(value: float | None) -> str:
    return "" if value is None else repr(float(value))


#: An extra column of table.csv: its name and its cell of a group.
Column = tuple[str, Callable[[Group], object]]


def study_table_csv(study: Study, columns: Sequence[Column] = (), aggregate: str = MEAN,
                    lead: str | None = None) -> str:
    """table.csv: one row per group: axis labels, n_done, n_expected, status, the MEASURES (spectral_gap, p, p_mean,
    n_eff: their definitions in MEASURES and p2pfl.network.mixing_measures; empty where a run has none), then per
    metric (every one, constant or not; ``ordered_metrics``: the headline ``lead``'s quantity first, each
    quantity's peers' mean and worst peer before its network average) its mean (``_iqm`` with aggregate iqm), low,
    high, n and interval (the Markdown cell's numbers: analysis.intervals.csv_columns; empty where there is no
    value, low and high also for n = 1), then ``columns`` (e.g. analysis.target's time to target)."""
    metrics = ordered_metrics(study.metrics, lead if lead is not None else headline_metric(study))
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*study.group_axes, "n_done", "n_expected", "status", *MEASURES,
                     *[col for m in metrics for col in csv_columns(m, aggregate)],
                     *[name for name, _ in columns]])
    for group in study.groups:
        row = [*group.axes.values(), group.n_done, group.n_expected, group.status,
               *[_num(group.measure(m)) for m in MEASURES]]
        for metric in metrics:
            row += csv_cells(group.estimate(metric, aggregate))
        writer.writerow(row + [column(group) for _, column in columns])
    return buf.getvalue()


def _md(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(_md(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(_md(c) for c in row) + " |" for row in rows])


def groups_markdown(study: Study, metrics: Sequence[str], aggregate: str = MEAN) -> str:
    """The groups table: axis labels, status, the MEASURES (each header naming its definition), then each metric's
    mean (or IQM) with its interval and n (analysis.intervals.cell)."""
    header = [*study.group_axes, "runs", *MEASURES.values(), *metrics]
    rows = []
    for g in study.groups:
        values = [g.measure(m) for m in MEASURES]
        rows.append([*g.axes.values(), g.status, *["–" if v is None else f"{v:.4g}" for v in values],
                     *[cell(g.estimate(m, aggregate)) for m in metrics]])
    return _md_table(header, rows)


#: What the measure columns are, under the groups table: one definition per column, the same for every row.
MEASURES_NOTE = (
    "Topology measures (one definition for every row, static or changing; p2pfl.network.mixing_measures): W_t is a "
    "round's mixing matrix over the alive peers (teleport's hand-over included), J = 11ᵀ/K, E the mean over the run's "
    "rounds (at most 256 evenly spaced; one W exactly for a static network with nothing drawn). Spectral gap: "
    "1 − |λ2(E[W])|; p: Koloskova et al.'s worst case 1 − λmax E[(W − J)ᵀ(W − J)] (1 − ‖W − J‖₂² for one W); "
    "p_mean: 1 − the mean contraction ‖W − J‖_F²/(K − 1) of a round on random X (an average, so at least p); "
    "n_eff: Vogels et al.'s effective number of neighbours of E[W] at the runs' γ (– where E[W] is not symmetric). "
    "Larger is faster mixing for each.")


def _unmeasured_note(study: Study) -> list[str]:
    """The note naming the groups whose measures an old run folder cannot give (`unmeasured_groups`)."""
    groups = unmeasured_groups(study)
    if not groups:
        return []
    return ["Measures not recomputed: " + "; ".join(g.label for g in groups) + ": run folders written before "
            "stats.mixing, whose changing network's p was a random-X estimate; it is shown as p_mean, and the "
            "spectral gap, p and n_eff of those runs are left empty (–): the report does not rebuild a run's "
            "network. Rerun them to measure them.", ""]


def constant_metrics(study: Study, metrics: Sequence[str]) -> dict[str, float]:
    """The metrics with one value in every finished run that reports it (at least two such runs: peers_scored = 16,
    also where another task's runs have no peers to score), by name: a column of them tells nothing about the
    groups."""
    finals = [p.final_metrics() for p in study.points if p.state == DONE]
    out = {}
    for m in metrics:
        values = {f[m] for f in finals if m in f}
        if sum(m in f for f in finals) >= 2 and len(values) == 1:
            out[m] = values.pop()
    return out


def build_study_markdown(study: Study, figures: dict[str, Path] | None = None, base: Path | None = None,
                         sections: Sequence[str] = (), aggregate: str = MEAN, lead: str | None = None) -> str:
    """report.md: a lead sentence on the headline metric ``lead`` (default ``headline_metric``), the groups table
    (``report_metrics``: the peers' mean and worst peer first, the network average beside them; the best peer left
    to table.csv; metrics constant in every run in a note under it), ``sections`` (markdown, e.g. the time to
    target), the points not finished with their error lines, and the figures (linked relative to ``base``, the
    report's folder)."""
    counts = study.counts()
    lead = lead if lead is not None else headline_metric(study)
    candidates = report_metrics(study, lead)
    constant = constant_metrics(study, candidates)
    shown = [m for m in candidates if m not in constant]
    constant_note = ["constant in every run that reports it: "
                     + ", ".join(f"{m} = {v:.6g}" for m, v in constant.items()), ""] \
        if constant else []
    parts = [f"# Study report: {study.name}", "", lead_sentence(study, lead), "",
             f"Study folder `{study.path}`; axes: {', '.join(study.axes)}; {len(study.points)} points: "
             + ", ".join(f"{n} {state}" for state, n in counts.items() if n) + ".", "",
             f"Groups: every axis except `{SEED_AXIS}`. {note(aggregate, study.seed_word)}. {MEASURES_NOTE} Every "
             "metric, with the interval bounds, is in table.csv.", "", groups_markdown(study, shown, aggregate), "",
             *constant_note, *_unmeasured_note(study), *sections]
    not_done = [p for p in study.points if p.state != DONE]
    if not_done:
        parts += ["## Points not finished", "",
                  _md_table(["point", "state", "error", "log"],
                            [[p.name, p.state, p.error or "–",
                              os.path.relpath(p.log, base) if p.log and base else (str(p.log) if p.log else "–")]
                             for p in not_done]), ""]
    if figures:
        parts += ["## Figures", ""]
        for title, path in figures.items():
            link = Path(os.path.relpath(path.resolve(), base.resolve())).as_posix() if base else str(path)
            parts += [f"### {title}", "", f"![{title}]({link})", ""]
    return "\n".join(parts)
