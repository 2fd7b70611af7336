"""`python -m p2pfl.study STUDY.yaml` (console script `p2pfl-study`): run a study's points, skip the finished
ones, rerun the failed ones, resume the preempted ones; `--status` says where each point stands."""
from __future__ import annotations

import argparse
import shlex
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from p2pfl.study.folder import StudyFolder, status_table
from p2pfl.study.local import default_jobs, run_local
from p2pfl.study.plan import StudyError, check_points, load_study
from p2pfl.study.slurm import sbatch_command, submit


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m p2pfl.study", description=__doc__)
    parser.add_argument("study", help="the study file (YAML), or a study folder made from one")
    parser.add_argument("--out", default="studies", help="parent of the study folder (default: studies)")
    parser.add_argument("--status", action="store_true", help="print done / running / failed / preempted / "
                                                              "pending and each failure's last error line")
    parser.add_argument("--ranks-per-run", type=int, default=1, help="MPI ranks of each point (1: one process "
                                                                     "hosting every peer)")
    parser.add_argument("--jobs", type=int, default=None, help="points at once locally (default: cores / ranks)")
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
    names = [p.name for p in plan.points]
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
            print(shlex.join(sbatch_command(folder, todo, args.ranks_per_run, plan.slurm, args.throttle,
                                            args.sbatch_arg)))
            return 0
        print(f"{folder.path}: {len(todo)} of {len(names)} points to run ({skipped} done or running)")
        for n in todo:
            print(f"  {states.get(n, 'pending'):<9} {n}")
        return 0
    folder.write_plan(plan, text)
    if not todo:
        print(f"{folder.path}: all {len(names)} points done")
        return 0
    if args.slurm:
        try:
            result = submit(folder, todo, args.ranks_per_run, plan.slurm, args.throttle, args.sbatch_arg)
        except (RuntimeError, FileNotFoundError) as exc:
            print(f"p2pfl.study: error: {exc}", file=sys.stderr)
            return 1
        print(f"{folder.path}: submitted job array {result} ({len(todo)} points)")
        return 0
    jobs = args.jobs or default_jobs(args.ranks_per_run)
    print(f"{folder.path}: running {len(todo)} of {len(names)} points, {jobs} at once, {args.ranks_per_run} "
          f"rank(s) each ({skipped} skipped)", flush=True)
    t0, done = time.monotonic(), [0]

    def event(name: str, what: str, rc: int | None) -> None:
        if what == "ended":
            done[0] += 1
            verdict = {0: "done", 75: "preempted"}.get(rc, f"FAILED (exit {rc})")
            print(f"  [{done[0]}/{len(todo)} {time.monotonic() - t0:6.0f}s] {name}: {verdict}", flush=True)

    run_local(folder, todo, ranks=args.ranks_per_run, jobs=jobs, on_event=event)
    final = folder.states(names)
    print(status_table(final))
    return 1 if any(s.state != "done" for s in final) else 0


if __name__ == "__main__":
    sys.exit(main())
