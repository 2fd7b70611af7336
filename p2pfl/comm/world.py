"""The process world: MPI when launched by mpirun/srun, a single process otherwise.

`World` is the only place that touches `MPI.COMM_WORLD`. Its collectives work the same in one process, so
callers never special-case `size == 1`: there they return the caller's own object, uncopied, without MPI.
"""
from __future__ import annotations

import socket
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

#: Seconds between flushing a failing rank's output and MPI_Abort.
ABORT_GRACE_S = 0.5


@dataclass
class World:
    """This process's place among the ranks: rank, size, node-local rank and the communicators."""

    comm: Any
    rank: int
    size: int
    local_rank: int
    local_size: int
    host: str

    @classmethod
    def detect(cls) -> World:
        comm = MPI.COMM_WORLD
        node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
        world = cls(comm=comm, rank=comm.Get_rank(), size=comm.Get_size(), local_rank=node.Get_rank(),
                    local_size=node.Get_size(), host=socket.gethostname())
        node.Free()
        return world

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    @property
    def alone(self) -> bool:
        """True in a job of one process: collectives are local and need no MPI call."""
        return self.size == 1

    def barrier(self) -> None:
        if not self.alone:
            self.comm.Barrier()

    def bcast(self, obj: Any, root: int = 0) -> Any:
        """Broadcast a small Python object (control data only; never model state)."""
        return obj if self.alone else self.comm.bcast(obj, root=root)

    def gather(self, obj: Any, root: int = 0) -> list[Any] | None:
        """Gather small per-rank records (metrics, placement) to the root, in rank order; None elsewhere."""
        return [obj] if self.alone else self.comm.gather(obj, root=root)

    def allgather(self, obj: Any) -> list[Any]:
        """Every rank's small record, in rank order, on every rank."""
        return [obj] if self.alone else self.comm.allgather(obj)

    def allreduce_max(self, value: float) -> float:
        """The largest of every rank's `value`, on every rank."""
        return value if self.alone else float(self.comm.allreduce(value, op=MPI.MAX))

    def allreduce_sum_(self, array: np.ndarray) -> np.ndarray:
        """Replace `array` (contiguous, numeric) by the elementwise sum over every rank's array; returns it.

        Integer sums are exact, so a fixed-point sum does not depend on the order of the reduction."""
        if not self.alone:
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
