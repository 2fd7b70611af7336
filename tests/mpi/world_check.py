"""Under mpirun: every World collective and reduction on inputs the test chose; each rank writes what it got.

Run as `mpirun -n R python tests/mpi/world_check.py INPUTS.json OUT_PREFIX`; INPUTS holds, per rank, the
values it contributes (`max`: floats, `ints`: int64 values, `floats`: float64 values). Rank r writes
OUT_PREFIX.r.json, so the test compares each rank's results with a brute force of its own.
"""
from __future__ import annotations

import json
import sys

import numpy as np

from p2pfl.comm import World


def main(inputs_path: str, out_prefix: str) -> None:
    world = World.detect()
    mine = json.loads(open(inputs_path).read())[world.rank]
    ints = np.array(mine["ints"], dtype=np.int64)
    floats = np.array(mine["floats"], dtype=np.float64)
    summed = world.allreduce_sum_(ints)
    world.allreduce_sum_(floats)
    graph = world.neighbour_comm([r for r in range(world.size) if r != world.rank])
    sources, destinations, _ = graph.Get_dist_neighbors()
    world.barrier()
    result = {
        "gather": world.gather({"rank": world.rank, "ints": mine["ints"]}),
        "allgather": world.allgather(world.rank * 10),
        "bcast": [world.bcast(f"from rank {world.rank}", root=root) for root in range(world.size)],
        "max": [world.allreduce_max(v) for v in mine["max"]],
        "ints": ints.tolist(), "floats": floats.tolist(), "in_place": summed is ints,
        "neighbours": [sorted(sources), sorted(destinations)],
    }
    with open(f"{out_prefix}.{world.rank}.json", "w") as fh:
        json.dump(result, fh)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
