"""Under mpirun: ranks kept for the test session, running one job after another (tests/conftest.py's MpiPool).

Run as `mpirun -n R python tests/mpi/server.py FOLDER CLIENT_PID`. Job n is FOLDER/n.json (written atomically by
the client): {"argv": [...]} for `python ARGV` (`-m p2pfl.run ...` or a tests/mpi script with its arguments), its
"env" (the whole environment) and "cwd". Every rank runs it as a fresh `mpirun -n R python ARGV` would (the study
worker's `fresh_point`: what a run changes in the process is put back after it), its output to FOLDER/n.RANK.out
and .err, then writes its exit status to FOLDER/n.RANK.rc. A job that aborts (MPI_Abort) ends the server, as it
ends a launch; the client starts another. The server ends on {"stop": true}, when its client's process is gone, or
after a job that left a rank larger than RETIRE_BYTES (it writes FOLDER/retired first).

A launch costs each rank an interpreter and torch's imports (2-5 s of a core); the ranks kept pay them once.
"""
from __future__ import annotations

import json
import os
import runpy
import sys
import time
from pathlib import Path
from typing import Any

POLL_S = 0.02
#: A server whose largest rank holds more than this after a job ends with it (the client starts another): memory a
#: job's models and data left behind is given back rather than kept beside the session's other processes.
RETIRE_BYTES = 1 << 30
#: What mpirun tells each rank in its environment (PMI_RANK...): kept under every job's environment.
LAUNCHER_VARIABLES = ("PMI_", "HYDI_", "HYDRA_", "MPI_", "MPIR_", "MPICH_", "OMPI_", "GFORTRAN_")


def _wait(path: Path, client: int) -> bool:
    """Whether `path` appeared before the client's process went away."""
    while not path.exists():
        try:
            os.kill(client, 0)
        except ProcessLookupError:
            return False
        time.sleep(POLL_S)
    return True


def _run(argv: list[str]) -> int:
    """`python ARGV` in this process: its exit status as the interpreter would give it."""
    from p2pfl.study.worker import exit_status

    if argv[:2] == ["-m", "p2pfl.run"]:
        return exit_status(argv[2:])
    sys.argv = list(argv)
    saved_path = list(sys.path)
    sys.path.insert(0, str(Path(argv[0]).resolve().parent))  # as `python SCRIPT` puts the script's folder first
    try:
        runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return int(exc.code or 0)
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001 - as an uncaught exception ends a rank of a launch: the job with it
        import traceback

        from mpi4py import MPI

        traceback.print_exc()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)
    finally:
        sys.path[:] = saved_path  # what the script added too
    return 0


def main(folder: Path, client: int) -> None:
    from mpi4py import MPI

    import p2pfl.run
    from p2pfl.plugin_scope import isolated
    from p2pfl.runtime.files import write_atomic
    from p2pfl.study.worker import fresh_point, output_to

    rank = MPI.COMM_WORLD.Get_rank()
    launcher = {k: v for k, v in os.environ.items() if k.startswith(LAUNCHER_VARIABLES)}
    n = 0
    while True:
        n += 1
        request = folder / f"{n}.json"
        if not _wait(request, client):
            return
        job = json.loads(request.read_text())
        if job.get("stop"):
            return
        argv = job["argv"]
        out, err = folder / f"{n}.{rank}.out", folder / f"{n}.{rank}.err"
        with isolated(), output_to(str(out), str(err), python_streams=True), \
                fresh_point(p2pfl.run.__file__, argv[2:] if argv[:2] == ["-m", "p2pfl.run"] else argv[1:]):
            os.environ.clear()
            os.environ.update({**job["env"], **launcher})
            os.chdir(job["cwd"])
            rc = _run(argv)
        _save_coverage()
        retire = _largest_resident_set(MPI.COMM_WORLD) > RETIRE_BYTES
        if retire and rank == 0:
            write_atomic(folder / "retired", f"after job {n}\n")
        write_atomic(folder / f"{n}.{rank}.rc", f"{rc}\n")
        if retire:
            return


def _largest_resident_set(comm: Any) -> int:
    """The largest resident set among the ranks now, in bytes (collective; waits without spinning)."""
    import numpy as np

    pages = int(Path("/proc/self/statm").read_text().split()[1])
    mine, largest = np.array([pages * os.sysconf("SC_PAGE_SIZE")], dtype=np.int64), np.zeros(1, dtype=np.int64)
    from mpi4py import MPI

    request = comm.Iallreduce(mine, largest, op=MPI.MAX)
    while not request.Test():
        time.sleep(POLL_S)
    return int(largest[0])


def _save_coverage() -> None:
    """Under scripts/coverage.sh (coverage.py follows subprocesses): what the jobs so far covered, saved now, so a
    later job that aborts the server does not lose it."""
    try:
        import coverage
    except ImportError:
        return
    current = coverage.Coverage.current()
    if current is not None:
        current.save()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
