"""The process world: MPI when launched by mpirun/srun, a single process otherwise.

`World` is the only place that touches `MPI.COMM_WORLD`. Its collectives work the same in one process, so
callers never special-case `size == 1`: there they return the caller's own object, uncopied, without MPI.
"""
from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

#: Seconds between flushing a failing rank's output and MPI_Abort.
ABORT_GRACE_S = 0.5
#: First and longest sleep (s) between two polls of a rank that waits on an oversubscribed node.
POLL_FIRST_S, POLL_MAX_S = 1e-4, 5e-3


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


def _oversubscribed(ranks_on_node: int) -> bool:
    """More ranks on this node than cores; P2PFL_OVERSUBSCRIBED=1 or 0 overrides the count."""
    forced = os.environ.get("P2PFL_OVERSUBSCRIBED")
    if forced in ("0", "1"):
        return forced == "1"
    return ranks_on_node > (os.cpu_count() or 1)


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

    @classmethod
    def detect(cls) -> World:
        comm = MPI.COMM_WORLD
        node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
        world = cls(comm=comm, rank=comm.Get_rank(), size=comm.Get_size(), local_rank=node.Get_rank(),
                    local_size=node.Get_size(), host=socket.gethostname(),
                    oversubscribed=_oversubscribed(node.Get_size()))
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

    def barrier(self) -> None:
        if not self.alone:
            self.settle()
            self.comm.Barrier()

    def bcast(self, obj: Any, root: int = 0) -> Any:
        """Broadcast a small Python object (control data only; never model state)."""
        if self.alone:
            return obj
        self.settle()
        return self.comm.bcast(obj, root=root)

    def gather(self, obj: Any, root: int = 0) -> list[Any] | None:
        """Gather small per-rank records (metrics, placement) to the root, in rank order; None elsewhere."""
        if self.alone:
            return [obj]
        self.settle()
        return self.comm.gather(obj, root=root)

    def allgather(self, obj: Any) -> list[Any]:
        """Every rank's small record, in rank order, on every rank."""
        if self.alone:
            return [obj]
        self.settle()
        return self.comm.allgather(obj)

    def allreduce_max(self, value: float) -> float:
        """The largest of every rank's `value`, on every rank."""
        if self.alone:
            return value
        self.settle()
        return float(self.comm.allreduce(value, op=MPI.MAX))

    def allreduce_sum_(self, array: np.ndarray) -> np.ndarray:
        """Replace `array` (contiguous, numeric) by the elementwise sum over every rank's array; returns it.

        Integer sums are exact, so a fixed-point sum does not depend on the order of the reduction."""
        if not self.alone:
            self.settle()
            self.comm.Allreduce(MPI.IN_PLACE, array, op=MPI.SUM)
        return array

    def neighbour_comm(self, ranks: list[int]) -> Any | None:
        """A distributed-graph communicator linking this rank to `ranks` both ways (None in one process)."""
        if self.alone:
            return None
        return self.comm.Create_dist_graph_adjacent(ranks, ranks, reorder=False)

    def abort(self, code: int = 1) -> None:
        """End every rank of the job now, with exit status `code`.

        This rank's output is flushed and given a moment to reach the launcher first: mpirun tears the job down
        on MPI_Abort and can drop what was still in flight (seen: about 1 run in 10 lost the traceback)."""
        sys.stdout.flush()
        sys.stderr.flush()
        time.sleep(ABORT_GRACE_S)
        self.comm.Abort(code)
