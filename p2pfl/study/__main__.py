"""`python -m p2pfl.study STUDY.yaml` (console script `p2pfl-study`): run a study's points, skip the finished
ones, rerun the failed ones, resume the preempted ones; `--status` says where each point stands. A tuned study
(p2pfl.study.tune) runs its tuning points first, chooses each arm's values, then runs its final points."""
from __future__ import annotations

import argparse
import shlex
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from p2pfl.study.folder import StudyFolder, status_table
from p2pfl.study.local import default_jobs, run_local
from p2pfl.study.plan import Plan, StudyError, check_points, load_study
from p2pfl.study.selection import ensure_finals, waiting_error
from p2pfl.study.slurm import sbatch_command, submit
from p2pfl.study.tune import TuneError, arm_name


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m p2pfl.study", description=__doc__, allow_abbrev=False)
    parser.add_argument("study", help="the study file (YAML), or a study folder made from one")
    parser.add_argument("--out", default="studies", help="parent of the study folder (default: studies)")
    parser.add_argument("--status", action="store_true", help="print done / running / failed / preempted / "
                                                              "pending and each failure's last error line")
    parser.add_argument("--ranks-per-run", type=int, default=1, help="MPI ranks of each point (1: one process "
                                                                     "hosting every peer)")
    parser.add_argument("--jobs", type=int, default=None, help="points at once locally (default: cores / ranks)")
    parser.add_argument("--isolate", action="store_true", help="run each one-rank point as its own `python -m "
                        "p2pfl.run` process (default: in worker processes that import p2pfl once)")
    parser.add_argument("--slurm", action="store_true", help="submit the points as one Slurm job array")
    parser.add_argument("--throttle", type=int, default=None, help="array tasks at once on Slurm (the %% of "
                                                                   "--array; default: the study's or 16)")
    parser.add_argument("--sbatch-arg", action="append", default=[], help="an extra sbatch option (repeatable)")
    parser.add_argument("--dry-run", action="store_true", help="print what would run (with --slurm: the sbatch "
                                                               "command) and change nothing")
    return parser


def _folder(study: str, out: str) -> tuple[StudyFolder, object]:
    path = Path(study)
    source = path / "study.yaml" if path.is_dir() else path
    root = None  # a study folder's copy of the file: its plug-ins' paths are relative to the original's folder
    if path.is_dir() and (path / "plan.json").is_file():
        root = StudyFolder(path).plan().get("root")
    plan, text = load_study(source, root=root)
    folder = StudyFolder(path if path.is_dir() else Path(out) / plan.name)
    return folder, (plan, text)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if hasattr(signal, "SIGPIPE") and argv is None:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `... --status | head` ends quietly
    try:
        if args.ranks_per_run < 1 or (args.jobs is not None and args.jobs < 1):
            raise StudyError("--ranks-per-run and --jobs must be >= 1")
        folder, (plan, text) = _folder(args.study, args.out)
        if not args.status:
            check_points(plan, args.ranks_per_run)  # before anything runs or is queued, and by --dry-run
    except StudyError as exc:
        print(f"p2pfl.study: error: {exc}", file=sys.stderr)
        return 2
    names = [p.name for p in plan.all_points()]
    if args.status:
        if not (folder.path / "plan.json").is_file():
            print(f"p2pfl.study: {folder.path}: not started ({len(names)} points planned)")
            return 0
        print(f"{folder.path}: {plan.name}")
        print(status_table(folder.states(names)))
        return 0
    states = {s.name: s.state for s in folder.states(names)} if folder.path.is_dir() else {}
    todo = [n for n in names if states.get(n, "pending") not in ("done", "running")]
    skipped = len(names) - len(todo)
    if args.dry_run:  # says what would run and writes nothing
        if args.slurm and todo:
            tuning = {p.name for p, _ in plan.tuning}
            first, then = [n for n in todo if n in tuning], [n for n in todo if n not in tuning]
            if first:
                print(shlex.join(sbatch_command(folder, first, args.ranks_per_run, plan.slurm, args.throttle,
                                                args.sbatch_arg) + ["array-tuning.txt"]))
            if then:
                after = ["--dependency=afterany:TUNING_JOB_ID"] if first else []
                print(shlex.join(sbatch_command(folder, then, args.ranks_per_run, plan.slurm, args.throttle,
                                                [*args.sbatch_arg, *after])))
            return 0
        print(f"{folder.path}: {len(todo)} of {len(names)} points to run ({skipped} done or running)")
        for n in todo:
            print(f"  {states.get(n, 'pending'):<9} {n}")
        return 0
    try:
        folder.write_plan(plan, text)
    except OSError as exc:  # --out read-only, full, or a file
        print(f"p2pfl.study: error: cannot write the study folder {folder.path} "
              f"({exc.strerror or type(exc).__name__}); give a writable --out", file=sys.stderr)
        return 2
    if not todo:
        if plan.tune is not None:  # the finished runs must still be of the values the study gives them
            try:
                ensure_finals(folder, plan)
            except TuneError as exc:
                print(f"p2pfl.study: error: {exc}", file=sys.stderr)
                return 1
        print(f"{folder.path}: all {len(names)} points done")
        return 0
    tuning = {p.name for p, _ in plan.tuning}
    first, then = [n for n in todo if n in tuning], [n for n in todo if n not in tuning]
    if args.slurm:
        return _submit(folder, plan, first, then, args)
    jobs = args.jobs or default_jobs(args.ranks_per_run)
    how = "its own process" if args.isolate or args.ranks_per_run > 1 else "a worker process"
    print(f"{folder.path}: running {len(todo)} of {len(names)} points ({len(first)} tuning), {jobs} at once, "
          f"{args.ranks_per_run} rank(s) each in {how} ({skipped} skipped)", flush=True)
    t0, done = time.monotonic(), [0]

    def event(name: str, what: str, rc: int | None) -> None:
        if what == "ended":
            done[0] += 1
            verdict = {0: "done", 75: "preempted"}.get(rc, f"FAILED (exit {rc})")
            print(f"  [{done[0]}/{len(todo)} {time.monotonic() - t0:6.0f}s] {name}: {verdict}", flush=True)

    if plan.tune is not None:
        return _run_tuned(folder, plan, names, first, then, args.ranks_per_run, jobs, event, args.isolate)
    run_local(folder, then, ranks=args.ranks_per_run, jobs=jobs, on_event=event, isolate=args.isolate)
    final = folder.states(names)
    print(status_table(final))
    return 1 if any(s.state != "done" for s in final) else 0


def _run_tuned(folder: StudyFolder, plan: Plan, names: list[str], first: list[str], then: list[str], ranks: int,
               jobs: int, event: Callable[[str, str, int | None], None], isolate: bool = False) -> int:
    """A tuned study locally: the tuning points, each arm's final points queued as soon as its tuning points are
    done (its choice printed), the arms chosen before this invocation's finals first."""
    tuning = {p.name: r.arm for p, r in plan.tuning}
    announced: set[tuple[tuple[str, str], ...]] = set()
    remaining = set(then)

    def ready() -> list[str]:
        selection, written = ensure_finals(folder, plan)
        fresh = [a for a in selection["arms"] if tuple(a["arm"].items()) not in announced]
        if fresh:
            print(choice_lines({**selection, "arms": fresh}), flush=True)
            announced.update(tuple(a["arm"].items()) for a in fresh)
        out = [n for n in then if n in written and n in remaining]
        remaining.difference_update(out)
        return out

    def follow(name: str, rc: int) -> list[str]:
        if name not in tuning or rc != 0:
            return []
        try:
            return ready()
        except TuneError as exc:  # said again, and the study ends failed, once the running points end
            print(f"p2pfl.study: error: {exc}", file=sys.stderr, flush=True)
            return []

    try:
        run_local(folder, ready() + first, ranks=ranks, jobs=jobs, on_event=event, follow=follow, isolate=isolate)
        selection, _ = ensure_finals(folder, plan)
    except TuneError as exc:
        print(f"p2pfl.study: error: {exc}", file=sys.stderr)
        return 1
    final = folder.states(names)
    print(status_table(final))
    if selection["waiting"]:
        print(f"p2pfl.study: {waiting_error(selection)}", file=sys.stderr)
    return 1 if any(s.state != "done" for s in final) else 0


def choice_lines(selection: dict) -> str:
    """Each arm's chosen values and score, one line each."""
    return "\n".join(f"  chosen for {arm_name(tuple(a['arm'].items()))}: "
                     + ", ".join(f"{k}={v}" for k, v in a["chosen"].items())
                     + f" ({selection['metric']} {a['score'] if a['score'] is not None else 'none'} on held-out data)"
                     for a in selection["arms"])


def _submit(folder: StudyFolder, plan: Plan, first: list[str], then: list[str], args: argparse.Namespace) -> int:
    """Submit the points as Slurm job arrays: a tuned study's tuning points first, then its final points as a
    second array that starts after the first ends (each final task makes the choice before it runs)."""
    try:
        submitted = []
        if first:
            tuning = submit(folder, first, args.ranks_per_run, plan.slurm, args.throttle, args.sbatch_arg,
                            array="array-tuning.txt")
            submitted.append(f"tuning array {tuning} ({len(first)} points)")
        waiting = None
        if then and plan.tune is not None and not first:  # tuning done: the finals of the chosen arms only
            selection, written = ensure_finals(folder, plan)
            then = [n for n in then if n in written]
            waiting = waiting_error(selection) if selection["waiting"] else None
        if then:
            after = [f"--dependency=afterany:{tuning}"] if first else []
            result = submit(folder, then, args.ranks_per_run, plan.slurm, args.throttle, [*args.sbatch_arg, *after])
            submitted.append(f"job array {result} ({len(then)} points{', after the tuning' if first else ''})")
    except (RuntimeError, FileNotFoundError, TuneError) as exc:
        print(f"p2pfl.study: error: {exc}", file=sys.stderr)
        return 1
    print(f"{folder.path}: submitted {'; '.join(submitted) or 'nothing'}")
    if waiting is not None:
        print(f"p2pfl.study: {waiting}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
