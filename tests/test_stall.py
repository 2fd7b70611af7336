"""No hang from a stalled rank: every collective waits under --timeout. A rank stopped with SIGSTOP (alive, silent)
ends the job within the timeout plus a grace, and every live rank names the call, the round and the stalled rank.
Without MPI: the watchdog's alarm across ranks and the World's deadline on a collective, with stand-ins."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from p2pfl.comm import World
from p2pfl.comm.watchdog import Expiry, Watchdog

from conftest import ROOT, mpirun_path

TIMEOUT_S = 10
#: Past the deadline: the alarm's grace and spread, the abort and mpirun's teardown of 4 ranks on 2 busy cores.
GRACE_S = 30
STALLED = 2
#: A live rank's line: the waiting rank, the round, the call (a collective and its caller, or a neighbour
#: receive, or its sends to a stopped rank that received before it stopped; "when rank R timed out" where another
#: rank's alarm ended its wait) and the ranks that did not arrive.
LINE = re.compile(r"^p2pfl: timeout: (?:peer \d+ \()?rank (\d+)\)? waited [\d.]+ s in round (\d+) "
                  r"(in \S+(?: \(\w+\))? from \S.*|for neighbour \d+ \(rank \d+\).*"
                  r"|for its sends to complete(?: when rank \d+ timed out)?)"
                  r"; ranks that did not arrive: (.*)$",
                  re.MULTILINE)


def _descendants(root: int) -> list[int]:
    """The pids of every process under `root` (scanning /proc: mpirun's proxies and the ranks)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _rank_pids(root: int) -> dict[int, int]:
    """rank -> pid of the job's python processes (their PMI_RANK)."""
    ranks = {}
    for pid in _descendants(root):
        try:
            proc = Path("/proc") / str(pid)
            env = dict(v.split("=", 1) for v in (proc / "environ").read_text().split("\0") if "=" in v)
            cmd = (proc / "cmdline").read_text()
        except OSError:
            continue
        if "p2pfl.run" in cmd and "PMI_RANK" in env:
            ranks[int(env["PMI_RANK"])] = pid
    return ranks


def _round_records(metrics: Path) -> int:
    return metrics.read_text().count('"type": "round"') if metrics.exists() else 0


def _stall_one_rank(args: list[str], out: Path) -> tuple[subprocess.CompletedProcess, float, int]:
    """Run `p2pfl.run ARGS` on 4 ranks, SIGSTOP rank STALLED once round 2 is recorded; returns the finished job,
    the seconds from the stop to its end, and the last round recorded before the stop."""
    launcher = mpirun_path()
    if launcher is None:
        pytest.skip("no mpirun available")
    cmd = [launcher, "-n", "4", sys.executable, "-m", "p2pfl.run", *args, "--timeout", str(TIMEOUT_S),
           "--out", str(out), "--name", "stall", "--no-progress", "--no-plots"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    pids: list[int] = []
    try:
        metrics = out / "stall" / "metrics.jsonl"
        start = time.monotonic()
        while _round_records(metrics) < 3 and proc.poll() is None and time.monotonic() - start < 180:
            time.sleep(0.2)
        assert proc.poll() is None, "the job ended before the stall"
        ranks = _rank_pids(proc.pid)
        assert sorted(ranks) == [0, 1, 2, 3], ranks
        os.kill(ranks[STALLED], signal.SIGSTOP)
        stopped = time.monotonic()
        last = _round_records(metrics) - 1  # round 0's record is the start
        stdout, stderr = proc.communicate(timeout=TIMEOUT_S + GRACE_S)
        return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr), time.monotonic() - stopped, last
    finally:
        pids = _descendants(proc.pid)
        for pid in pids:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _assert_named(proc: subprocess.CompletedProcess, elapsed: float, last: int) -> None:
    assert proc.returncode == 3, (proc.returncode, proc.stderr[-3000:])  # the timeout's exit status
    assert elapsed < TIMEOUT_S + GRACE_S
    lines = LINE.findall(proc.stderr)
    assert sorted(int(rank) for rank, *_ in lines) == [r for r in range(4) if r != STALLED], proc.stderr[-3000:]
    for _rank, round_, _call, absent in lines:
        assert int(round_) >= last and absent == str(STALLED), proc.stderr[-3000:]


@pytest.mark.mpi
def test_a_stopped_rank_ends_the_synchronous_run_naming_it(runs_dir: Path) -> None:
    proc, elapsed, last = _stall_one_rank(["--algorithm", "consensus", "--peers", "8", "--vector-size", "300000",
                                           "--rounds", "5000"], runs_dir)
    _assert_named(proc, elapsed, last)


@pytest.mark.mpi
def test_a_stopped_rank_ends_the_asynchronous_run_naming_it(runs_dir: Path) -> None:
    proc, elapsed, last = _stall_one_rank(["--algorithm", "consensus", "--peers", "8", "--vector-size", "300000",
                                           "--mode", "async", "--compute-time", "1", "--compute-spread", "0.3",
                                           "--updates", "40000"], runs_dir)
    _assert_named(proc, elapsed, last)


class _Alarm:
    """A stand-in for the alarm across ranks: rank 1 rang at the first look; rank 2 never answers."""

    def __init__(self) -> None:
        self.rung = False

    def heard(self) -> int | None:
        return 1

    def ring(self) -> None:
        self.rung = True

    def answers(self, grace: float) -> tuple[int, ...]:
        return (2,)


def test_an_alarm_from_another_rank_ends_an_armed_wait_before_its_deadline() -> None:
    lines: list[str] = []
    ended = threading.Event()
    alarm = _Alarm()
    watchdog = Watchdog(lambda line: (lines.append(line), ended.set()), alarm)  # type: ignore[arg-type]
    watchdog.arm(3600, lambda e: f"waited {e.seconds()} s{e.when()}{e.absent()}")
    assert ended.wait(60), "the alarm never ended the wait"
    assert float(lines[0].split()[1]) < 60  # it waited the time it took the alarm to come, not its deadline
    assert lines[0].endswith("s when rank 1 timed out; ranks that did not arrive: 2") and alarm.rung


def test_a_deadline_counts_from_when_its_call_started() -> None:
    """A wait armed `since` an earlier moment (a peer's exchange started before it waited) expires `seconds` after
    that moment: earlier than a collective another rank armed in between, so the line naming the silent neighbour
    comes first."""
    lines: list[str] = []
    ended = threading.Event()
    watchdog = Watchdog(lambda line: (lines.append(line), ended.set()))
    started = time.monotonic()
    watchdog.arm(30.0, lambda e: f"waited {e.seconds()} s", since=started - 29.5)
    assert ended.wait(20), "the deadline never came"
    assert time.monotonic() - started < 20  # 0.5 s left of its 30, not 30 from the arming
    assert lines == ["waited 30 s"]


class _BlockingComm:
    """A communicator whose allgather never returns until released (a rank that never arrives)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def allgather(self, obj: object) -> list[object]:
        self.release.wait()
        return [obj]


def _exchange_step(world: World) -> list[object]:
    return world.allgather("mine")


def test_a_collective_past_the_deadline_names_the_call_its_caller_and_the_round() -> None:
    comm = _BlockingComm()
    lines: list[str] = []
    watchdog = Watchdog(lambda line: (lines.append(line), comm.release.set()))
    world = World(comm=comm, rank=3, size=4, local_rank=3, local_size=4, host="here", timeout=0.2, round=7,
                  watchdog=watchdog)
    assert _exchange_step(world) == ["mine"]  # the watchdog's on_expire let the collective return
    assert lines == ["p2pfl: timeout: rank 3 waited 0.2 s in round 7 in allgather from _exchange_step"]


def test_the_timeout_line_names_who_did_not_arrive() -> None:
    world = World(comm=None, rank=1, size=4, local_rank=1, local_size=4, host="here")
    assert world.timeout == 300  # --timeout's default, before the configuration is read
    line = world.timeout_line("barrier", "checkpoint", None, Expiry(4.04, alerted_by=0, silent=(2, 3)))
    assert line == ("p2pfl: timeout: rank 1 waited 4 s in set-up in barrier from checkpoint when rank 0 timed out; "
                    "ranks that did not arrive: 2, 3")
    every = world.timeout_line("bcast", "main", 5, Expiry(10, silent=()))
    assert every.endswith("in round 5 in bcast from main; ranks that did not arrive: none (every rank waits in "
                          "some call)")
