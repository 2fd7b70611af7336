"""Compare runs in a markdown report, with FedMuscle's per-peer Δ% against local training; or report a study.

    python -m analysis.report RUN_DIR [RUN_DIR ...] [--out report.md] [--baseline LOCAL_RUN_DIR] [--no-plots]
                              [--metrics NAME,NAME] [--transpose] [--plot-format png,pdf,svg]
    python -m analysis.report STUDY_DIR [--out REPORT_DIR] [--no-plots] [--metric NAME] [--aggregate mean|iqm]
                              [--target VALUE [--direction higher|lower]] [--compare AXIS]
                              [--plot-format png,pdf,svg]

A folder with a plan.json is a study (runs over a grid of options x seeds): its report (groups over seeds, their
mean or, with --aggregate iqm, interquartile mean, with an interval that says what it is: analysis.intervals;
analysis.study) and its figures (analysis.study_plots) are written into STUDY_DIR/report/ unless --out says where
(`write_study_report`); --target adds each group's time to reach that value of the metric (analysis.target);
--compare AXIS adds compare-AXIS.png, the arms of that axis as lines on one shared axis (analysis.study_plots).

Draws each run's plots beside the report, into ``<report>-plots/<run>/`` (report.md: report-plots/; never into a
run's own plots/, which stay as the run drew them), prints one markdown table with a row per run (algorithm,
topology, peers, partition, rounds, the final eval metrics --metrics names, by default each metric's network
average and peers' mean and the plain metrics: not the peers' min and max, the untrained model or bookkeeping;
bytes sent per peer per round, wall time; --transpose: a row per field, a column per run) and writes it to
--out.
When a ``local`` run with the same peers is available (``--baseline``, or among the RUN_DIRs), every other
run also gets the per-peer table of SPEC §6 / FedMuscle Table 1:
Δ_n = (M_n − M_n^local) / M_n^local × 100, sign flipped for lower-is-better metrics, and the mean Δ.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from p2pfl.config import ConfigError, plot_format_names
from p2pfl.fedmuscle.records import TASK_METRIC, TASK_METRIC_NAME
from p2pfl.runtime.files import write_atomic
from p2pfl.runtime.progress import format_bytes

from .delta import Delta, delta_percent, lower_is_better
from .intervals import AGGREGATES, MEAN
from .metric_panels import is_bookkeeping, split_metric_name
from .runs import Run, RunFolderError, load_run
from .study import (
    Study,
    StudyFolderError,
    build_study_markdown,
    headline_metric,
    is_study,
    load_study,
    study_table_csv,
)
from .target import Target, target_columns, target_markdown
from .tuning import load_selection, tuning_markdown

__all__ = [
    "Delta",
    "delta_percent",
    "lower_is_better",
    "runs_table",
    "delta_table",
    "build_report",
    "write_study_report",
    "table_metrics",
    "plots_folder",
    "main",
]

LOCAL = "local"


# ----- formatting ------------------------------------------------------------------------------------------------
def _fmt(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return f"{value:.{digits}g}"


def _fmt_bytes(value: float | None) -> str:
    return "–" if value is None else format_bytes(value)


def _fmt_pct(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:+.2f}%"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


#: The roles of the metrics the run table shows by default (analysis.metric_panels.split_metric_name): the
#: network average, the peers' mean and plain metrics; the peers' min and max and the untrained model are left to
#: --metrics (and to the figures).
TABLE_ROLES = ("avg", "peer_mean", "value")


def table_metrics(runs: Sequence[Run]) -> list[str]:
    """The final eval metrics the run table shows by default: those of TABLE_ROLES, no bookkeeping, in order of
    first appearance."""
    names = dict.fromkeys(name for run in runs for name in run.final_metrics())
    return [n for n in names if split_metric_name(n)[1] in TABLE_ROLES and not is_bookkeeping(n)]


def runs_table(runs: Sequence[Run], metrics: Sequence[str] | None = None, transpose: bool = False) -> str:
    """The comparison table: one row per run, a column per final eval metric of ``metrics`` (default
    ``table_metrics``); ``transpose``: one row per field, one column per run (many metrics, few runs)."""
    metric_names = list(metrics) if metrics is not None else table_metrics(runs)
    header = ["run", "algorithm", "topology", "peers", "partition", "rounds", *metric_names,
              "bytes sent/peer/round", "wall time (s)"]
    rows = []
    for run in runs:
        done, planned = run.rounds_done, run.planned_rounds
        rounds = f"{done}/{planned}" if planned != done else str(done)
        final = run.final_metrics()
        wall = run.wall_time_s()
        rows.append([
            run.name, run.algorithm, run.topology_name, str(run.num_peers), run.partition_label or "–", rounds,
            *[_fmt(final.get(name)) for name in metric_names],
            _fmt_bytes(run.bytes_sent_per_peer_round()), "–" if wall is None else f"{wall:.1f}",
        ])
    if transpose:
        return _md_table(["field", *[row[0] for row in rows]], [[name, *[row[i] for row in rows]]
                                                               for i, name in enumerate(header) if i > 0])
    return _md_table(header, rows)


# ----- Δ% against local training ---------------------------------------------------------------------------------
def peer_task_metrics(run: Run) -> dict[str, tuple[float, str]]:
    """peer → (task metric value, metric name) from the last per-peer evaluation (FedMuscle's peers)."""
    per_peer = run.final_per_peer() or {}
    return {peer: (float(m[TASK_METRIC]), str(m[TASK_METRIC_NAME])) for peer, m in per_peer.items()
            if TASK_METRIC in m}


def same_peers(a: Run, b: Run) -> bool:
    """Whether two runs have the same peers: the same (model, task) per peer when both record peers_spec,
    else the same number of peers."""
    sa, sb = a.peers_spec, b.peers_spec
    if sa is not None and sb is not None:
        def key(spec: list[dict]) -> list[tuple[int, str, str]]:
            return [(s["peer"], s["model"], s["task"]) for s in spec]
        return key(sa) == key(sb)
    return a.num_peers == b.num_peers


def delta_table(run: Run, local: Run) -> tuple[str, Delta] | None:
    """Per-peer table (peer, model, task, local, method, Δ%) and the Δ of ``run`` against ``local``, or None
    when they share no peer with a task metric."""
    method_m = peer_task_metrics(run)
    local_m = peer_task_metrics(local)
    peers = [p for p in method_m if p in local_m]
    if not peers:
        return None
    flags = {p: lower_is_better(method_m[p][1]) for p in peers}
    delta = delta_percent({p: method_m[p][0] for p in peers}, {p: local_m[p][0] for p in peers}, flags)
    spec = {str(s["peer"]): s for s in (run.peers_spec or local.peers_spec or [])}
    algo = run.algorithm
    header = ["peer", "model", "task", "metric", "local", algo, "Δ%"]
    rows = []
    for peer in delta.per_peer:
        s = spec.get(peer, {"model": "–", "task": "–"})
        rows.append([peer, s["model"], s["task"], method_m[peer][1],
                     _fmt(local_m[peer][0]), _fmt(method_m[peer][0]), _fmt_pct(delta.per_peer[peer])])
    rows.append(["mean", "", "", "", "", "", _fmt_pct(delta.mean)])
    return _md_table(header, rows), delta


# ----- the report --------------------------------------------------------------------------------------------------
def build_report(runs: Sequence[Run], baseline: Run | None = None, out_path: Path | None = None,
                 plots: dict[str, list[Path]] | None = None, metrics: Sequence[str] | None = None,
                 transpose: bool = False) -> str:
    """The markdown report: the runs table (``runs_table``'s ``metrics`` and ``transpose``), then Δ% tables for
    runs with a matching local baseline."""
    shown = list(runs) + ([baseline] if baseline is not None and all(r.path != baseline.path for r in runs) else [])
    parts = ["# p2pfl run report", "", runs_table(shown, metrics, transpose), ""]

    locals_ = [baseline] if baseline is not None else [r for r in runs if r.algorithm == LOCAL]
    notes: list[str] = []
    if baseline is not None and baseline.algorithm != LOCAL:
        notes.append(f"note: baseline {baseline.name} has algorithm {baseline.algorithm!r}, not {LOCAL!r}")
    for run in runs:
        if run.algorithm == LOCAL or (baseline is not None and run.path == baseline.path):
            continue
        match = next((loc for loc in locals_ if same_peers(run, loc)), None)
        if match is None:
            if baseline is not None:
                notes.append(f"note: no Δ% for {run.name}: its peers differ from baseline {baseline.name}")
            continue
        result = delta_table(run, match)
        if result is None:
            notes.append(f"note: no Δ% for {run.name}: no per-peer task metric shared with {match.name}")
            continue
        table, delta = result
        parts += [f"## Δ% of {run.name} against local training ({match.name})", "", table, "",
                  f"mean Δ = {_fmt_pct(delta.mean)}", ""]
    if notes:
        parts += [*notes, ""]

    if plots:
        parts += ["## Plots", ""]
        base = out_path.resolve().parent if out_path is not None else Path.cwd()
        def link(text: str, file: Path) -> str:
            return f"[{text}]({Path(os.path.relpath(file.resolve(), base)).as_posix()})"

        for name, files in plots.items():
            stems: dict[str, list[Path]] = {}
            for file in files:
                stems.setdefault(file.stem, []).append(file)
            links = [link(stem, same[0]) + "".join(f" ({link(f.suffix[1:], f)})" for f in same[1:])
                     for stem, same in stems.items()]
            if links:
                parts.append(f"- {name}: {', '.join(links)}")
        parts.append("")
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry: rebuild plots, print the report and write it to --out."""
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m analysis.report",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR",
                        help="run folders to compare, or one study folder (a folder with plan.json)")
    parser.add_argument("--out", default=None,
                        help="markdown file to write (default: report.md); for a study, the report folder (default: "
                             "STUDY_DIR/report; a name ending in .md is the markdown file, the rest goes beside it)")
    parser.add_argument("--baseline", metavar="LOCAL_RUN_DIR",
                        help="a 'local' run with the same peers, for the per-peer Δ%% table")
    parser.add_argument("--no-plots", action="store_true",
                        help="do not draw the runs' plots (for a study: do not draw its figures)")
    parser.add_argument("--plot-format", default="png", metavar="FORMATS",
                        help="the figures' file formats, comma-separated: png, pdf, svg (default: png)")
    parser.add_argument("--metrics", metavar="NAME,NAME",
                        help="runs only: the final metrics of the run table, comma-separated (default: each metric's "
                             "network average and peers' mean, and the plain metrics)")
    parser.add_argument("--transpose", action="store_true",
                        help="runs only: the run table with a row per field and a column per run")
    parser.add_argument("--metric", help="study only: the metric of the report's lead sentence, first columns and "
                                         "figures (default: the peers' mean of the test, kNN or probe accuracy the "
                                         "runs report, else its network average)")
    parser.add_argument("--compare", metavar="AXIS",
                        help="study only: also draw compare-AXIS.png: the metric over rounds with the arms of AXIS "
                             "(e.g. topology) as lines on one shared axis, one panel each for the peers' mean, the "
                             "worst peer and the network average")
    parser.add_argument("--aggregate", choices=AGGREGATES,
                        help="study only: each group's value over its seeds, in the tables and figures: mean "
                             "(default; from 3 seeds a Student-t 95%% CI) or iqm, the interquartile mean for many "
                             "seeds (the mean of the middle 50%%; from 3 seeds a percentile-bootstrap 95%% CI); "
                             "at 2 seeds either shows the min-max")
    parser.add_argument("--target", type=float, metavar="VALUE",
                        help="study only: per group, the simulated time, rounds and bytes per peer until each seed's "
                             "first evaluation with the metric at VALUE (mean and 95%% CI over the seeds that reach "
                             "it, and how many do)")
    parser.add_argument("--direction", choices=("higher", "lower"),
                        help="with --target: whether the metric reaches it from below (higher is better: >= VALUE) "
                             "or above (<= VALUE); default: lower for names with a word loss, error, distance, "
                             "drift, shift or mse, else higher")
    args = parser.parse_args(argv)
    try:
        formats = plot_format_names(args.plot_format)
    except ConfigError as exc:
        print(f"analysis.report: {exc}", file=sys.stderr)
        return 2

    studies = [p for p in args.runs if is_study(p)]
    if studies:
        if len(args.runs) > 1 or args.baseline:
            print("analysis.report: a study folder is reported on its own (no other folders, no --baseline)",
                  file=sys.stderr)
            return 2
        if args.direction is not None and args.target is None:
            print("analysis.report: note: --direction applies with --target only", file=sys.stderr)
        for given, flag in ((args.metrics, "--metrics"), (args.transpose or None, "--transpose")):
            if given is not None:
                print(f"analysis.report: note: {flag} applies to run folders only", file=sys.stderr)
        if args.compare is not None and args.no_plots:
            print("analysis.report: note: --compare draws a figure; --no-plots draws none", file=sys.stderr)
        return _study_main(studies[0], args.out, not args.no_plots, args.metric, args.target, args.direction,
                           formats, args.aggregate or MEAN, args.compare)
    for given, flag in ((args.metric, "--metric"), (args.target, "--target"), (args.direction, "--direction"),
                        (args.aggregate, "--aggregate"), (args.compare, "--compare")):
        if given is not None:
            print(f"analysis.report: note: {flag} applies to study folders only", file=sys.stderr)

    try:
        runs = [load_run(p) for p in args.runs]
        baseline = load_run(args.baseline) if args.baseline else None
    except RunFolderError as exc:
        print(f"analysis.report: {exc}", file=sys.stderr)
        return 2

    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()] if args.metrics else None
    known = {name for run in runs for name in run.final_metrics()}
    unknown = [m for m in metrics or () if m not in known]
    if unknown:
        print(f"analysis.report: --metrics: no run reports {unknown[0]!r}; they report: {', '.join(sorted(known))}",
              file=sys.stderr)
        return 2

    out = Path(args.out or "report.md")
    plots: dict[str, list[Path]] = {}
    if not args.no_plots:
        from .plots import plot_run

        folder = plots_folder(out)
        for run in runs + ([baseline] if baseline is not None else []):
            try:
                plots[run.name] = plot_run(run, folder / run.name, formats)
            except Exception as exc:  # a broken plot must not lose the report
                print(f"analysis.report: plots of {run.name} failed: {type(exc).__name__}: {exc}",
                      file=sys.stderr)
        print(f"analysis.report: plots in {folder}", file=sys.stderr)

    text = build_report(runs, baseline, out_path=out, plots=plots, metrics=metrics, transpose=args.transpose)
    print(text)
    write_atomic(out, text)
    return 0


def plots_folder(report: Path) -> Path:
    """Where the report of some runs draws their plots: ``<report stem>-plots/`` beside the markdown file (one
    folder per run inside), so that a report never writes into the runs it reads."""
    return report.with_name(f"{report.stem}-plots")


def write_study_report(study_dir: str | os.PathLike, out: str | os.PathLike | None = None, plots: bool = True,
                       metric: str | None = None, target: float | None = None,
                       direction: str | None = None, formats: str | Sequence[str] = "png",
                       aggregate: str = MEAN, compare: str | None = None) -> tuple[str, list[Path]]:
    """Write report.md, table.csv and (unless ``plots`` is False) the figures, in ``formats`` (png, pdf, svg),
    into ``out`` (default STUDY_DIR/report; an ``out`` ending in .md names the markdown file, the rest goes
    beside it), with the time to ``target`` of the metric when given (analysis.target), each group's value over
    its seeds their ``aggregate`` (mean or iqm, analysis.intervals), and with ``compare`` (an axis) the figure
    comparing its arms on one axis (analysis.study_plots.plot_compare); return the markdown and the files
    written. The headline metric (lead sentence, first columns, figures) is ``metric``, else
    analysis.study.headline_metric's (the peers' mean first)."""
    study = load_study(study_dir)
    if metric is not None and study.metrics and metric not in study.metrics:
        raise StudyFolderError(f"no finished run reports the metric {metric!r}; they report: "
                               + ", ".join(study.metrics))
    if compare is not None:
        from .study_plots import compare_axis_error

        error = compare_axis_error(study, compare)
        if error is not None:
            raise StudyFolderError(error)
    lead = headline_metric(study, metric)
    goal = _target(study, metric, target, direction)
    target = Path(out) if out is not None else study.path / "report"
    md_path = target if target.suffix == ".md" else target / "report.md"
    folder = md_path.parent
    figures: dict[str, Path] = {}
    drawn: list[Path] = []
    if plots:
        from .study_plots import plot_study
        from .style import plot_formats, saved_files  # matplotlib, only when drawing

        with plot_formats(formats):
            figures = plot_study(study, folder, lead, aggregate, compare=compare)
            drawn = [file for path in figures.values() for file in saved_files(path)]
    selection = load_selection(study.path)
    sections = ([tuning_markdown(selection)] if selection is not None else []) + (
        [target_markdown(study, goal, aggregate)] if goal is not None else [])
    text = build_study_markdown(study, figures, base=folder, sections=sections, aggregate=aggregate, lead=lead)
    write_atomic(folder / "table.csv", study_table_csv(study, target_columns(goal, aggregate) if goal is not None
                                                       else (), aggregate, lead=lead))
    write_atomic(md_path, text)
    return text, [md_path, folder / "table.csv", *drawn]


def print_written(prog: str, write: Callable[[], tuple[str, list[Path]]]) -> int:
    """Run ``write`` (a study's markdown and the files written), print the markdown and the files; 2 on a
    StudyFolderError, said on stderr as ``prog: ...``."""
    try:
        text, written = write()
    except StudyFolderError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    print(text)
    print(f"{prog}: wrote {', '.join(str(p) for p in written)}", file=sys.stderr)
    return 0


def _target(study: Study, metric: str | None, value: float | None, direction: str | None) -> Target | None:
    """The target of --target on the report's metric (None without --target)."""
    if value is None:
        return None
    name = headline_metric(study, metric)
    if name is None:
        raise StudyFolderError("--target: no finished run reports a metric")
    return Target.of(name, value, direction)


def _study_main(study_dir: str, out: str | None, plots: bool, metric: str | None, target: float | None = None,
                direction: str | None = None, formats: Sequence[str] = ("png",), aggregate: str = MEAN,
                compare: str | None = None) -> int:
    """The study report: print the markdown, write report.md, table.csv and the figures."""
    return print_written("analysis.report", lambda: write_study_report(study_dir, out, plots=plots, metric=metric,
                                                                       target=target, direction=direction,
                                                                       formats=formats, aggregate=aggregate,
                                                                       compare=compare))


if __name__ == "__main__":
    sys.exit(main())
