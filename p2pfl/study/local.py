"""Run a study's points on this machine: each point one `mpirun -n R python -m p2pfl.run` job (R = 1: one
process hosting every peer), as many at once as the cores allow."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from p2pfl.study.folder import StudyFolder


def point_command(folder: StudyFolder, name: str, ranks: int, mpirun: str | None = None) -> list[str]:
    """The command that runs (or, with a checkpoint, resumes) one point."""
    run = [sys.executable, "-m", "p2pfl.run", "--config", str(folder.config(name)), "--no-progress"]
    if folder.has_checkpoint(name):
        run += ["--resume", str(folder.run_dir(name))]
    else:
        run += ["--out", str(folder.path / "runs"), "--name", name]
    if ranks > 1:
        launcher = mpirun or shutil.which("mpirun", path=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
        if launcher is None:
            raise RuntimeError("--ranks-per-run > 1 needs mpirun on PATH")
        return [launcher, "-n", str(ranks), *run]
    return run


def default_jobs(ranks: int) -> int:
    """Points at once: one rank per core."""
    return max(1, (os.cpu_count() or 1) // ranks)


def run_local(folder: StudyFolder, names: list[str], ranks: int = 1, jobs: int | None = None,
              on_event: Callable[[str, str, int | None], None] | None = None, poll_s: float = 0.05,
              follow: Callable[[str, int], list[str]] | None = None) -> dict[str, int]:
    """Run the points `names` (jobs at a time); returns each one's exit status. `follow(name, rc)`, called as a
    point ends, names the points that it made runnable, queued next (a tuned arm's finals). Ctrl-C or SIGTERM stops
    the running jobs with SIGTERM, so they checkpoint at their round's end (exit 75) and resume next time."""
    jobs = jobs or default_jobs(ranks)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "PYTHONUNBUFFERED": "1"}
    queue, running, status = list(names), {}, {}
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for proc, _ in running.values():
            proc.send_signal(signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        while queue or running:
            while queue and len(running) < jobs and not stopping:
                name = queue.pop(0)
                folder.begin(name, f"local:{os.getpid()}@{socket.gethostname()}")
                log = open(folder.log(name), "ab")  # noqa: SIM115 - closed when the job ends
                proc = subprocess.Popen(point_command(folder, name, ranks), stdout=log, stderr=subprocess.STDOUT,
                                        env=env, start_new_session=True)
                folder.set_job(name, f"local:{proc.pid}@{socket.gethostname()}")
                running[name] = (proc, log)
                if on_event:
                    on_event(name, "started", None)
            for name, (proc, log) in list(running.items()):
                rc = proc.poll()
                if rc is None:
                    continue
                log.close()
                folder.end(name, rc)
                status[name] = rc
                del running[name]
                if on_event:
                    on_event(name, "ended", rc)
                if follow is not None and not stopping:
                    queue[:0] = [n for n in follow(name, rc) if n not in queue and n not in running]
            if stopping:
                queue.clear()
            time.sleep(poll_s)
    except KeyboardInterrupt:
        stop(signal.SIGINT, None)
        for name, (proc, log) in running.items():
            rc = proc.wait()
            log.close()
            folder.end(name, rc)
            status[name] = rc
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    return status
