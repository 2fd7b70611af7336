"""Robust aggregation against the plain gossip mean: one gossip step of a ResNet-18-sized vector per aggregator.

Run under mpirun (one peer per rank, a cycle):
    mpirun -n 4 python benchmarks/bench_aggregators.py [--numel 11200000] [--repeats 10]
Each repetition times, in the same process and interleaved, a full `p2pfl.gossip.Gossip.mix` step (exchange and
combination) with every aggregator; rank 0 prints the median seconds of the slowest rank and the ratio to
`mean` (target: trimmed-mean and clipped-gossip within 2x of mean).
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.cycle import cycle_arguments, cycle_exchange  # noqa: E402
from p2pfl.byzantine import AGGREGATORS, Robust  # noqa: E402
from p2pfl.gossip import CheckedExchange, Gossip  # noqa: E402
from p2pfl.network import NetworkSchedule  # noqa: E402


def main() -> None:
    args = cycle_arguments(repeats=10).parse_args()
    world, graph, ex, payload = cycle_exchange(args.numel)
    net = NetworkSchedule(world.size, graph=graph).at(1)
    x = {world.rank: payload}
    checked = CheckedExchange(ex, world)
    memory: dict = {}
    gossips = {a: Gossip(checked, Robust(frozenset(), aggregator=a, trim=1), seed=0) for a in AGGREGATORS}
    times: dict[str, list[float]] = {a: [] for a in AGGREGATORS}
    for rep in range(args.repeats + 1):
        for aggregator in AGGREGATORS:
            world.barrier()
            t0 = MPI.Wtime()
            gossips[aggregator].mix(x, net, round=rep, memory=lambda p: memory)
            seconds = world.allreduce_max(MPI.Wtime() - t0)
            if rep:  # the first repetition warms up
                times[aggregator].append(seconds)
    if world.is_root:
        base = statistics.median(times["mean"])
        print(f"gossip step of {args.numel} floats on a cycle of {world.size} ranks, median of {args.repeats}:")
        for aggregator in AGGREGATORS:
            t = statistics.median(times[aggregator])
            print(f"  {aggregator:<15} {t * 1e3:8.1f} ms   {t / base:5.2f}x mean")


if __name__ == "__main__":
    main()
