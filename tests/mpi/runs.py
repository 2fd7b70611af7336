"""Under mpirun: several `python -m p2pfl.run` commands in one job, one after the other.

Run as `mpirun -n R python tests/mpi/runs.py RUNS.json`, RUNS.json mapping a name to a command line (p2pfl.run's
arguments, its --out and --name included). One launch pays the interpreters' start and imports once for every
run (tests/conftest.py's runs_on_ranks); each run is the command line's own `_run`, in this job's world.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from p2pfl.comm import World
from p2pfl.run import _run

if __name__ == "__main__":
    world = World.detect()
    for argv in json.loads(Path(sys.argv[1]).read_text()).values():
        _run(world, argv)
