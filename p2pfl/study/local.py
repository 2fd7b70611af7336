"""Run a study's points on this machine, as many at once as the cores allow: a point of one rank (one process
hosting every peer) in a pool of worker processes that import p2pfl once (WorkerPool; --isolate: each its own
`python -m p2pfl.run` process), a point of R > 1 ranks as one `mpirun -n R python -m p2pfl.run` job."""
from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from p2pfl.study.folder import StudyFolder


def point_args(folder: StudyFolder, name: str) -> list[str]:
    """The `python -m p2pfl.run` arguments that run (or, with a checkpoint, resume) one point."""
    run = ["--config", str(folder.config(name)), "--no-progress"]
    if folder.has_checkpoint(name):
        return [*run, "--resume", str(folder.run_dir(name))]
    return [*run, "--out", str(folder.path / "runs"), "--name", name]


def point_command(folder: StudyFolder, name: str, ranks: int, mpirun: str | None = None) -> list[str]:
    """The command that runs (or, with a checkpoint, resumes) one point."""
    run = [sys.executable, "-m", "p2pfl.run", *point_args(folder, name)]
    if ranks > 1:
        launcher = mpirun or shutil.which("mpirun", path=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
        if launcher is None:
            raise RuntimeError("--ranks-per-run > 1 needs mpirun on PATH")
        return [launcher, "-n", str(ranks), *run]
    return run


def default_jobs(ranks: int) -> int:
    """Points at once: one rank per core."""
    return max(1, (os.cpu_count() or 1) // ranks)


class _Process:
    """A point run as its own `python -m p2pfl.run` process (or mpirun job), its output appended to its log."""

    def __init__(self, cmd: list[str], log: Path, env: dict[str, str]) -> None:
        self._log = open(log, "ab")  # noqa: SIM115 - closed when the point ends
        self._proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                      start_new_session=True)
        self.pid = self._proc.pid

    def poll(self) -> int | None:
        rc = self._proc.poll()
        if rc is not None:
            self._log.close()
        return rc

    def stop(self) -> None:
        self._proc.send_signal(signal.SIGTERM)


class _Worker:
    """One p2pfl.study.worker process: p2pfl imported once, points sent one at a time over its stdin."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "p2pfl.study.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, start_new_session=True, text=True)

    def send(self, request: dict) -> bool:
        """Hand it a point; False when it is gone (it retired or died while idle)."""
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return False
        return True

    def close(self, grace_s: float = 10.0) -> None:
        """End of input: it exits; killed if it has not within `grace_s`."""
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class WorkerPool:
    """Worker processes that each import p2pfl once and run one-rank points in turn (p2pfl.study.worker).

    A small hand-written loop over a pipe rather than multiprocessing.Pool: Pool's task of a worker that dies
    (segfault, OOM kill) never completes and the pool hangs, and concurrent.futures' ProcessPoolExecutor breaks
    as a whole. Here each worker is a plain child process: its reply line gives the point's exit status, its
    stdout closing mid-point says it died (the point gets the worker's exit status, as a subprocess point would
    its own, and a line in its log), and the next point starts a fresh worker in its place. SIGTERM reaches the
    worker running a point exactly as it reached that point's process."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self._idle: list[_Worker] = []

    def start(self, name: str, argv: list[str], log: Path) -> _Pooled:
        """Run the point `name` on an idle worker (a new one when none is left)."""
        request = {"name": name, "argv": argv, "log": str(log)}
        while self._idle:
            worker = self._idle.pop()
            if worker.send(request):
                return _Pooled(self, worker, log)
            worker.close(grace_s=0)
        worker = _Worker(self.env)
        if not worker.send(request):
            worker.close(grace_s=0)
            raise RuntimeError(f"{name}: a study worker could not be started (exit status {worker.proc.returncode})")
        return _Pooled(self, worker, log)

    def release(self, worker: _Worker) -> None:
        self._idle.append(worker)

    def close(self) -> None:
        for worker in self._idle:
            worker.close()
        self._idle.clear()


class _Pooled:
    """A point running on a pool's worker."""

    def __init__(self, pool: WorkerPool, worker: _Worker, log: Path) -> None:
        self._pool, self._worker, self._log = pool, worker, log
        self.pid = worker.proc.pid
        self.fd = worker.proc.stdout.fileno()
        self._rc: int | None = None

    def poll(self) -> int | None:
        if self._rc is not None or not select.select([self.fd], [], [], 0)[0]:
            return self._rc
        line = self._worker.proc.stdout.readline()
        if line:
            reply = json.loads(line)
            self._rc = int(reply["rc"])
            if reply.get("retire"):
                self._worker.close()
            else:
                self._pool.release(self._worker)
            return self._rc
        self._rc = self._worker.proc.wait()  # the worker died mid-point
        how = f"signal {-self._rc} ({signal.Signals(-self._rc).name})" if self._rc < 0 else f"exit {self._rc}"
        with open(self._log, "a") as log:
            log.write(f"p2pfl: error: the study's worker (pid {self.pid}) died running this point: {how}\n")
        return self._rc

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)


def run_local(folder: StudyFolder, names: list[str], ranks: int = 1, jobs: int | None = None,
              on_event: Callable[[str, str, int | None], None] | None = None, poll_s: float = 0.05,
              follow: Callable[[str, int], list[str]] | None = None, isolate: bool = False) -> dict[str, int]:
    """Run the points `names` (jobs at a time); returns each one's exit status. Points of one rank run in a
    WorkerPool (`isolate`: each its own `python -m p2pfl.run` process, as points of several ranks under mpirun
    always do). `follow(name, rc)`, called as a point ends, names the points that it made runnable, queued next
    (a tuned arm's finals). Ctrl-C or SIGTERM stops the running points with SIGTERM, so they checkpoint at their
    round's end (exit 75) and resume next time."""
    jobs = jobs or default_jobs(ranks)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "PYTHONUNBUFFERED": "1"}
    pool = None if isolate or ranks > 1 else WorkerPool(env)
    queue, running, status = list(names), {}, {}
    stopping = False
    here = socket.gethostname()

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for point in running.values():
            point.stop()

    def launch(name: str) -> _Process | _Pooled:
        if pool is not None:
            return pool.start(name, point_args(folder, name), folder.log(name))
        return _Process(point_command(folder, name, ranks), folder.log(name), env)

    def ended(name: str, rc: int) -> None:
        folder.end(name, rc)
        status[name] = rc
        del running[name]

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        while queue or running:
            while queue and len(running) < jobs and not stopping:
                name = queue.pop(0)
                folder.begin(name, f"local:{os.getpid()}@{here}")
                running[name] = launch(name)
                folder.set_job(name, f"local:{running[name].pid}@{here}")
                if on_event:
                    on_event(name, "started", None)
            for name, point in list(running.items()):
                rc = point.poll()
                if rc is None:
                    continue
                ended(name, rc)
                if on_event:
                    on_event(name, "ended", rc)
                if follow is not None and not stopping:
                    queue[:0] = [n for n in follow(name, rc) if n not in queue and n not in running]
            if stopping:
                queue.clear()
            _wait(running.values(), poll_s)
    except KeyboardInterrupt:
        stop(signal.SIGINT, None)
        while running:
            for name, point in list(running.items()):
                rc = point.poll()
                if rc is not None:
                    ended(name, rc)
            _wait(running.values(), poll_s)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
        if pool is not None:
            pool.close()
    return status


def _wait(points: Iterable[_Process | _Pooled], timeout: float) -> None:
    """Sleep `timeout`, or less when a pooled point's worker replies (or dies) first."""
    fds = [p.fd for p in points if isinstance(p, _Pooled)]
    with contextlib.suppress(InterruptedError):
        if fds:
            select.select(fds, [], [], timeout)
        else:
            time.sleep(timeout)
