"""Neighbour exchange of a ResNet-18-sized vector: p2pfl's Transport next to a bare mpi4py exchange.

Run under mpirun (one peer per rank, a cycle):
    mpirun -n 4 python benchmarks/bench_exchange.py [--numel 11200000] [--repeats 20] [--json OUT]
Both exchanges move the same bytes to the same neighbours in the same process, interleaved round by round;
rank 0 prints the median seconds of each and their ratio (target: p2pfl at most 1.1x the bare exchange).
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.cycle import cycle_arguments, cycle_exchange  # noqa: E402


def bare_exchange(comm: MPI.Comm, send: np.ndarray, recvs: list[np.ndarray], neighbours: list[int]) -> None:
    reqs = [comm.Irecv(buf, source=src, tag=7) for buf, src in zip(recvs, neighbours)]
    reqs += [comm.Isend(send, dest=dst, tag=7) for dst in neighbours]
    MPI.Request.Waitall(reqs)


def main() -> None:
    parser = cycle_arguments(repeats=20)
    parser.add_argument("--json")
    args = parser.parse_args()
    world, graph, ex, payload = cycle_exchange(args.numel)
    n = world.size
    neighbours = sorted(graph.neighbors(world.rank))
    send = payload.numpy()
    recvs = [np.empty_like(send) for _ in neighbours]
    ours, bare = [], []
    for rep in range(args.repeats + 2):
        world.barrier()
        t0 = MPI.Wtime()
        pending = ex.start({world.rank: payload}, round=rep)
        pending.wait()
        pending.release()  # as the gossip pipeline does once it has combined
        t1 = MPI.Wtime()
        world.barrier()
        t2 = MPI.Wtime()
        bare_exchange(world.comm, send, recvs, neighbours)
        t3 = MPI.Wtime()
        if rep >= 2:  # warm-up
            ours.append(world.allreduce_max(t1 - t0))
            bare.append(world.allreduce_max(t3 - t2))
    if world.is_root:
        result = {"ranks": n, "numel": args.numel, "bytes_per_message": args.numel * 4,
                  "p2pfl_median_s": statistics.median(ours), "bare_median_s": statistics.median(bare),
                  "ratio": statistics.median(ours) / statistics.median(bare)}
        print(f"cycle of {n} ranks, {args.numel * 4 / 2**20:.1f} MiB per neighbour: p2pfl "
              f"{result['p2pfl_median_s'] * 1e3:.1f} ms, bare mpi4py {result['bare_median_s'] * 1e3:.1f} ms, "
              f"ratio {result['ratio']:.3f}")
        if args.json:
            Path(args.json).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
