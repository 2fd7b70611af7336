"""The process world: MPI when launched by mpirun/srun, a single process otherwise."""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any

from mpi4py import MPI


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
    def detect(cls) -> "World":
        comm = MPI.COMM_WORLD
        node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
        world = cls(comm=comm, rank=comm.Get_rank(), size=comm.Get_size(), local_rank=node.Get_rank(),
                    local_size=node.Get_size(), host=socket.gethostname())
        node.Free()
        return world

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        self.comm.Barrier()

    def bcast(self, obj: Any, root: int = 0) -> Any:
        """Broadcast a small Python object (control data only; never model state)."""
        return self.comm.bcast(obj, root=root)

    def gather(self, obj: Any, root: int = 0) -> list[Any] | None:
        """Gather small per-rank records (metrics, placement) to the root."""
        return self.comm.gather(obj, root=root)

    def allgather(self, obj: Any) -> list[Any]:
        return self.comm.allgather(obj)

    def abort(self, code: int = 1) -> None:
        """End every rank of the job now."""
        self.comm.Abort(code)


def launched_by_mpi() -> bool:
    """True when an MPI launcher started this process (several ranks, or a launcher variable set)."""
    keys = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "SLURM_STEP_ID", "MPI_LOCALRANKID")
    return any(k in os.environ for k in keys)
