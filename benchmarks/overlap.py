"""A round of gradient tracking with its two exchanges one after another next to both started together.

Run under mpirun (one peer per rank, a cycle):
    mpirun -n 4 python benchmarks/overlap.py [--numel 1000000 4000000] [--repeats 10] [--json OUT]
Sequential: x's exchange started, combined, checked and agreed, then y's (two agreements: how every scheme ran
before p2pfl.gossip.exchanges). Overlapped: `GradientTracking.round`, both exchanges in flight before either is
waited on, one agreement. Both in the same process, interleaved repetition by repetition behind a barrier, each
going first every other repetition; rank 0 prints, per size, the median seconds of each (the slowest rank's) and
overlapped / sequential.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.cycle import cycle_exchange  # noqa: E402
from p2pfl.byzantine import Robust  # noqa: E402
from p2pfl.gossip import CheckedExchange, Gossip, Rule  # noqa: E402
from p2pfl.gossip.schemes.gradient_tracking import GradientTracking  # noqa: E402
from p2pfl.network import NetworkSchedule  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--numel", type=int, nargs="+", default=[1_000_000, 4_000_000])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json")
    args = parser.parse_args()
    results = []
    for numel in args.numel:
        world, graph, transport, x = cycle_exchange(numel)
        me = world.rank
        gossip = Gossip(CheckedExchange(transport, world), Robust(frozenset()), seed=0)
        net = NetworkSchedule(world.size, graph=graph).at(1)
        g = {me: torch.randn(numel, generator=torch.Generator().manual_seed(100 + me))}
        lr = 0.1
        times: dict[str, list[float]] = {"sequential": [], "overlapped": []}
        for rep in range(args.repeats + 2):
            for mode in sorted(times, reverse=rep % 2 == 1):  # each first every other repetition
                state = {me: {"wy": g[me].clone(), "g": torch.zeros(numel)}}
                world.barrier()
                t0 = MPI.Wtime()
                if mode == "sequential":
                    exchanges = gossip.exchanges(net, rep)
                    s = state[me]
                    y = {me: s["wy"] + g[me] - s["g"]}
                    exchanges.start({me: x - lr * y[me]}, rule=Rule()).result()
                    tracked = exchanges.start(y, rule=Rule()).result().combined
                    s["wy"], s["g"] = tracked[me], g[me].clone()
                else:
                    GradientTracking().round(gossip, {me: x}, g, lr, state, net, rep)
                elapsed = MPI.Wtime() - t0
                if rep >= 2:  # warm-up
                    times[mode].append(world.allreduce_max(elapsed))
        if world.is_root:
            seq, ovl = statistics.median(times["sequential"]), statistics.median(times["overlapped"])
            results.append({"ranks": world.size, "numel": numel, "sequential_median_s": seq,
                            "overlapped_median_s": ovl, "ratio": ovl / seq})
            print(f"gradient tracking, cycle of {world.size} ranks, {numel:,} float32 a vector: sequential "
                  f"{seq * 1e3:.1f} ms, overlapped {ovl * 1e3:.1f} ms, overlapped/sequential {ovl / seq:.3f}",
                  flush=True)
    if world.is_root and args.json:
        Path(args.json).write_text(json.dumps(results))


if __name__ == "__main__":
    main()
