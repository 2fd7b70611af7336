"""The process world: MPI when launched by mpirun/srun, a single process otherwise.

`World` is the only place that touches `MPI.COMM_WORLD`. Its collectives work the same in one process, so
callers never special-case `size == 1`: there they return the caller's own object, uncopied, without MPI. Across
ranks every collective waits under the deadline `timeout` (--timeout): past it, every live rank prints one line
naming the call, its caller, the round and the ranks that did not arrive, and the job ends with TIMEOUT_EXIT.
"""
from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from mpi4py import MPI

from p2pfl.comm.watchdog import TIMEOUT_EXIT, Alarm, Expiry, Watchdog

T = TypeVar("T")

#: Seconds between flushing a failing rank's output and MPI_Abort.
ABORT_GRACE_S = 0.5
#: First and longest sleep (s) between two polls of a rank that waits on an oversubscribed node.
POLL_FIRST_S, POLL_MAX_S = 1e-4, 5e-3
#: The deadline of a collective before the configuration is read (--timeout's default); the run sets its own.
DEFAULT_TIMEOUT_S = 300.0
#: The process's watchdog across ranks, made by the first `World.detect` of a job of several ranks.
_WATCHDOG: Watchdog | None = None


def poll_until(done: Callable[[], bool]) -> None:
    """Return once done() is true, sleeping between polls (doubling from POLL_FIRST_S up to POLL_MAX_S).

    MPI's blocking waits poll at full speed; where a node runs more ranks than it has cores, the ranks that wait
    (for the root's evaluation, for a slow neighbour) then take the cores from the ranks that still compute
    (measured: the main job's kNN evaluation of the network average, 20 ranks on 2 cores, 248 s). Sleeping
    waiters give the cores back, for at most POLL_MAX_S of extra latency."""
    pause = POLL_FIRST_S
    while not done():
        time.sleep(pause)
        pause = min(2 * pause, POLL_MAX_S)


def function_name(code: Any) -> str:
    """A code object's qualified name (Runner.checkpoint) where Python keeps it (3.11), else its plain name."""
    return getattr(code, "co_qualname", code.co_name)


def _oversubscribed(ranks_on_node: int) -> bool:
    """More ranks on this node than cores; P2PFL_OVERSUBSCRIBED=1 or 0 overrides the count."""
    forced = os.environ.get("P2PFL_OVERSUBSCRIBED")
    if forced in ("0", "1"):
        return forced == "1"
    return ranks_on_node > (os.cpu_count() or 1)


def _abort(comm: Any, code: int) -> None:
    """Flush this rank's output, give it a moment to reach the launcher, then MPI_Abort the job with `code`.

    mpirun tears the job down on MPI_Abort and can drop what was still in flight (seen: about 1 run in 10 lost
    the traceback)."""
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(ABORT_GRACE_S)
    comm.Abort(code)


def _watchdog(comm: Any) -> Watchdog:
    """The process's watchdog (made once, collectively): it aborts the job with TIMEOUT_EXIT, and alarms the
    other ranks where MPI lets a second thread call it (MPI_THREAD_MULTIPLE, mpi4py's default)."""
    global _WATCHDOG
    if _WATCHDOG is None:
        alarm = Alarm(comm.Dup()) if MPI.Query_thread() == MPI.THREAD_MULTIPLE else None
        _WATCHDOG = Watchdog(lambda message: _abort(comm, TIMEOUT_EXIT), alarm)
    return _WATCHDOG


@dataclass
class World:
    """This process's place among the ranks: rank, size, node-local rank and the communicators."""

    comm: Any
    rank: int
    size: int
    local_rank: int
    local_size: int
    host: str
    #: More ranks on this node than cores: waits sleep between polls (`poll_until`) instead of spinning.
    oversubscribed: bool = False
    #: Seconds a collective may wait before the job aborts (--timeout once the run's configuration is read).
    timeout: float = DEFAULT_TIMEOUT_S
    #: The round under way (the runner tells it; None in set-up), for the timeout's line.
    round: int | None = None
    #: The deadline's keeper (None in one process, where nothing waits).
    watchdog: Watchdog | None = field(default=None, repr=False)

    @classmethod
    def detect(cls) -> World:
        comm = MPI.COMM_WORLD
        node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
        world = cls(comm=comm, rank=comm.Get_rank(), size=comm.Get_size(), local_rank=node.Get_rank(),
                    local_size=node.Get_size(), host=socket.gethostname(),
                    oversubscribed=_oversubscribed(node.Get_size()),
                    watchdog=_watchdog(comm))
        node.Free()
        return world

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    @property
    def alone(self) -> bool:
        """True in a job of one process: collectives are local and need no MPI call."""
        return self.size == 1

    def settle(self) -> None:
        """On an oversubscribed node, wait without spinning until every rank has arrived (a polled Ibarrier),
        so that the collective that follows does not take the cores from the ranks still computing."""
        if self.oversubscribed and not self.alone:
            poll_until(self.comm.Ibarrier().Test)

    def timeout_line(self, call: str, caller: str, round: int | None, expiry: Expiry) -> str:
        """The line a rank prints when its collective `call` from `caller` waited past the deadline."""
        when = f"in round {round}" if round is not None else "in set-up"
        return (f"p2pfl: timeout: rank {self.rank} waited {expiry.seconds()} s {when} in {call} from {caller}"
                f"{expiry.when()}{expiry.absent()}")

    @contextmanager
    def computing(self, what: str) -> Iterator[None]:
        """A stretch of this rank's own work (a set-up step) under the deadline too: past `timeout` without
        leaving it, the rank prints one line naming `what` and the job ends with TIMEOUT_EXIT, so input that makes
        a rank compute for ever (every rank busy, none waiting in a collective) cannot hang the job. A collective
        within the stretch has its own deadline, after which the stretch's runs on."""
        if self.watchdog is None:
            yield
            return
        when = f"in round {self.round}" if self.round is not None else "in set-up"
        seconds = self.timeout
        self.watchdog.arm(seconds, lambda expiry: (
            f"p2pfl: timeout: rank {self.rank} computed for {expiry.seconds()} s {when} in {what} without reaching "
            f"the next collective (--timeout {seconds:g}){expiry.when()}{expiry.absent(always=False)}"))
        try:
            yield
        finally:
            self.watchdog.disarm()

    def _guarded(self, call: str, caller: str | None, collective: Callable[[], T]) -> T:
        """settle, then `collective`, under the deadline; `caller` defaults to the function calling the World."""
        if self.watchdog is None:
            self.settle()
            return collective()
        name = caller or function_name(sys._getframe(2).f_code)
        round = self.round
        self.watchdog.arm(self.timeout, lambda expiry: self.timeout_line(call, name, round, expiry))
        try:
            self.settle()
            return collective()
        finally:
            self.watchdog.disarm()

    def barrier(self, caller: str | None = None) -> None:
        """Wait until every rank has arrived. `caller` (here and in every collective) names the purpose in the
        timeout's line; by default the calling function's name."""
        if not self.alone:
            self._guarded("barrier", caller, self.comm.Barrier)

    def bcast(self, obj: Any, root: int = 0, caller: str | None = None) -> Any:
        """Broadcast a small Python object (control data only; never model state)."""
        if self.alone:
            return obj
        return self._guarded("bcast", caller, lambda: self.comm.bcast(obj, root=root))

    def gather(self, obj: Any, root: int = 0, caller: str | None = None) -> list[Any] | None:
        """Gather small per-rank records (metrics, placement) to the root, in rank order; None elsewhere."""
        if self.alone:
            return [obj]
        return self._guarded("gather", caller, lambda: self.comm.gather(obj, root=root))

    def allgather(self, obj: Any, caller: str | None = None) -> list[Any]:
        """Every rank's small record, in rank order, on every rank."""
        if self.alone:
            return [obj]
        return self._guarded("allgather", caller, lambda: self.comm.allgather(obj))

    def allreduce_max(self, value: float, caller: str | None = None) -> float:
        """The largest of every rank's `value`, on every rank."""
        if self.alone:
            return value
        return float(self._guarded("allreduce (max)", caller, lambda: self.comm.allreduce(value, op=MPI.MAX)))

    def allreduce_sum_(self, array: np.ndarray, caller: str | None = None) -> np.ndarray:
        """Replace `array` (contiguous, numeric) by the elementwise sum over every rank's array; returns it.

        Integer sums are exact, so a fixed-point sum does not depend on the order of the reduction."""
        if not self.alone:
            self._guarded("allreduce (sum)", caller, lambda: self.comm.Allreduce(MPI.IN_PLACE, array, op=MPI.SUM))
        return array

    def neighbour_comm(self, ranks: list[int]) -> Any | None:
        """A distributed-graph communicator linking this rank to `ranks` both ways (None in one process)."""
        if self.alone:
            return None
        return self.comm.Create_dist_graph_adjacent(ranks, ranks, reorder=False)

    def abort(self, code: int = 1) -> None:
        """End every rank of the job now, with exit status `code` (this rank's output flushed first)."""
        _abort(self.comm, code)
