"""The study folder and the state of each point in it.

    STUDY/study.yaml            the study file as written
    STUDY/plan.json             the expanded plan (axes, and every point's name, labels and options)
    STUDY/points/NAME.yaml      the point's p2pfl.run --config
    STUDY/runs/NAME/            the point's run folder (finished: summary.json)
    STUDY/logs/NAME.log         everything the point's job printed, every attempt appended
    STUDY/logs/NAME.rc          its last exit status (75: stopped by a signal with a checkpoint)
    STUDY/logs/NAME.job         who runs it now: local:PID@HOST or slurm:JOBID_TASK
    STUDY/failed/NAME.K/        the run folder of an earlier failed attempt, kept
    STUDY/tuning.json, .csv     a tuned study's choice: every tuning run's score, each arm's chosen values

A point is done (summary.json), failed (a summary.json with status failed, or an exit status other than 0 and
75), running (a job named and alive),
preempted (75, or a job gone with a checkpoint: resumed next time) or pending.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from p2pfl.records import is_failed
from p2pfl.runtime.files import loads, write_atomic
from p2pfl.runtime.preemption import PREEMPTED_EXIT
from p2pfl.study.plan import Plan, StudyError

STATES = ("done", "running", "failed", "preempted", "pending")


@dataclass(frozen=True)
class PointState:
    name: str
    state: str
    error: str | None = None  # a failed point's last error line


_ERROR_LINE = re.compile(r"error|exception|traceback|killed|cancelled|abort|fatal|timeout", re.IGNORECASE)


def last_error_line(log: str) -> str | None:
    """The line of a job's output that says why it failed: p2pfl's one-line error when there is one, else the
    last line that reads like an error (a traceback's last line), else the last non-empty line. Progress bars'
    carriage returns split lines too; long lines are cut at 300 characters."""
    lines = [line.strip() for line in re.split(r"[\r\n]+", log) if line.strip()]
    if not lines:
        return None
    line = next((line for line in reversed(lines) if line.startswith(("p2pfl: error:", "p2pfl: timeout:"))), None)
    line = line or next((line for line in reversed(lines) if _ERROR_LINE.search(line)), lines[-1])
    return line if len(line) <= 300 else line[:297] + "..."


def failed_reason(summary: Path) -> str | None:
    """The reason a failed run's summary.json gives (None for a finished run's, or one that cannot be read)."""
    try:
        record = loads(summary.read_text())
    except (OSError, ValueError):
        return None
    return str(record.get("reason") or "failed") if isinstance(record, dict) and is_failed(record) else None


class StudyFolder:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def config(self, name: str) -> Path:
        return self.path / "points" / f"{name}.yaml"

    def run_dir(self, name: str) -> Path:
        return self.path / "runs" / name

    def log(self, name: str) -> Path:
        return self.path / "logs" / f"{name}.log"

    def rc_file(self, name: str) -> Path:
        return self.path / "logs" / f"{name}.rc"

    def job_file(self, name: str) -> Path:
        return self.path / "logs" / f"{name}.job"

    def write_plan(self, plan: Plan, text: str) -> None:
        """Write study.yaml, plan.json and every point's config (rewritten each time: a plan may grow); a tuned
        study's final points get theirs once their arms' values are chosen (p2pfl.study.selection)."""
        (self.path / "logs").mkdir(parents=True, exist_ok=True)
        (self.path / "runs").mkdir(exist_ok=True)
        write_atomic(self.path / "study.yaml", text)
        write_atomic(self.path / "plan.json", json.dumps(plan.to_dict(), indent=1))
        for point in plan.all_points() if plan.tune is None else [p for p, _ in plan.tuning]:
            write_atomic(self.config(point.name), yaml.safe_dump(point.options, sort_keys=False))

    def plan(self) -> dict[str, Any]:
        """plan.json as written by write_plan; StudyError (one line) when it cannot be read as one."""
        path = self.path / "plan.json"
        try:
            plan = json.loads(path.read_text())
        except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise StudyError(f"{path}: unreadable ({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); "
                             "rewrite it from the study file: python -m p2pfl.study STUDY.yaml") from None
        if not isinstance(plan, dict):
            raise StudyError(f"{path}: does not hold a study's plan (a JSON object)")
        return plan

    def rc(self, name: str) -> int | None:
        try:
            return int(self.rc_file(name).read_text().strip())
        except (OSError, ValueError):
            return None

    def has_checkpoint(self, name: str) -> bool:
        return (self.run_dir(name) / "checkpoint" / "state.json").is_file()

    def state(self, name: str) -> PointState:
        """Where the point stands (see the module's docstring)."""
        summary = self.run_dir(name) / "summary.json"
        if summary.is_file():
            failure = failed_reason(summary)
            if failure is None:
                return PointState(name, "done")
            log = self.log(name).read_text(errors="replace") if self.log(name).is_file() else ""
            return PointState(name, "failed", last_error_line(log) or failure)
        rc = self.rc(name)
        job = self.job_file(name).read_text().strip() if self.job_file(name).is_file() else None
        if job is not None and _alive(job):
            return PointState(name, "running")
        if rc == PREEMPTED_EXIT or (self.has_checkpoint(name) and rc in (None, 0)):
            return PointState(name, "preempted")
        if rc is not None and rc != 0 or (rc == 0 and job is None):
            log = self.log(name).read_text(errors="replace") if self.log(name).is_file() else ""
            return PointState(name, "failed", last_error_line(log) or f"exit status {rc}")
        if job is not None:  # a job that vanished without an exit status: killed
            return PointState(name, "failed", f"the job {job} ended without an exit status (killed?)")
        return PointState(name, "pending")

    def states(self, names: list[str]) -> list[PointState]:
        return [self.state(n) for n in names]

    def begin(self, name: str, job: str) -> None:
        """Mark a point as started by `job` (local:PID@HOST, slurm:JOBID_TASK); a failed attempt's run folder
        (no checkpoint to resume from) is kept under failed/."""
        self.rc_file(name).unlink(missing_ok=True)
        run = self.run_dir(name)
        if run.exists() and not self.has_checkpoint(name):
            k = 1
            while (self.path / "failed" / f"{name}.{k}").exists():
                k += 1
            (self.path / "failed").mkdir(exist_ok=True)
            shutil.move(str(run), self.path / "failed" / f"{name}.{k}")
        self.set_job(name, job)

    def set_job(self, name: str, job: str) -> None:
        write_atomic(self.job_file(name), job)

    def end(self, name: str, rc: int) -> None:
        write_atomic(self.rc_file(name), f"{rc}\n")
        self.job_file(name).unlink(missing_ok=True)


def _alive(job: str) -> bool:
    """Whether the job a .job file names still runs (a local process on this host, or a Slurm job)."""
    kind, _, ident = job.partition(":")
    if kind == "local":
        pid, _, host = ident.partition("@")
        if host != socket.gethostname():
            return True  # another machine's job: trust the marker
        try:
            os.kill(int(pid), 0)
        except (ProcessLookupError, ValueError):
            return False
        except PermissionError:
            return True
        return True
    if kind == "slurm":
        if shutil.which("squeue") is None:
            return True
        out = subprocess.run(["squeue", "-h", "-j", ident, "-o", "%T"], capture_output=True, text=True)
        return out.returncode == 0 and bool(out.stdout.strip())
    return False


def status_table(states: list[PointState]) -> str:
    """The counts per state, then one line per failed point with its error line."""
    counts = {s: sum(p.state == s for p in states) for s in STATES}
    lines = ["  ".join(f"{s} {counts[s]}" for s in STATES) + f"  (of {len(states)})"]
    lines += [f"  failed  {p.name}: {p.error}" for p in states if p.state == "failed"]
    lines += [f"  {p.state:<8}{p.name}" for p in states if p.state in ("running", "preempted")]
    return "\n".join(lines)
