"""Faulty networks side by side: FedAvg on Fashion-MNIST over a cycle with link failures and crashes, and the
cost of the network schedule per round.

    python benchmarks/bench_network.py --out runs/network-faults            # the study of issue 9's note
    python benchmarks/bench_network.py --schedule-only                      # only the schedule's cost

Each configuration runs as its own `python -m p2pfl.run` (one process, all peers in it) for every seed; the
table gives the final accuracy of the network average and of the peers (mean, min), the consensus distance
after the last round, the links used per round, and the schedule's share of a round (time_schedule_s / round_s,
measured in the same run). The schedule-only part times NetworkSchedule.at(t) alone for larger K.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analysis.runs import load_run  # noqa: E402

CONFIGS: dict[str, list[str]] = {
    "q=0": [],
    "q=0.2": ["--link-failure", "0.2"],
    "q=0.5": ["--link-failure", "0.5"],
    "3/20 crash @3": ["--crash", "15%@3"],
}


def run_study(out: Path, seeds: list[int], rounds: int, subset: int, peers: int, train: list[str]) -> list[dict]:
    rows = []
    for name, extra in CONFIGS.items():
        for seed in seeds:
            folder = f"{name.replace('/', 'of').replace(' ', '').replace('=', '')}-s{seed}"
            cmd = [sys.executable, "-m", "p2pfl.run", "--algorithm", "fedavg", "--dataset", "fashion-mnist",
                   "--topology", "cycle", "--peers", str(peers), "--rounds", str(rounds), "--seed", str(seed),
                   "--train-subset", str(subset), "--eval-every", "5", "--out", str(out), "--name", folder,
                   "--no-progress", *train, *extra]
            if not (out / folder / "summary.json").is_file():
                subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
            run = load_run(out / folder)
            rounds_done = [r for r in run.rounds if r["round"] > 0]
            final = run.final_metrics()
            crashed = rounds_done[-1]["network"]["crashed"]
            rows.append({
                "config": name, "seed": seed, "acc_avg": final["test_acc_avg"],
                "acc_peer_mean": final["test_acc_peer_mean"], "acc_peer_min": final["test_acc_peer_min"],
                "consensus": rounds_done[-1]["consensus_distance"],
                "links": statistics.mean(r["network"]["links"] for r in rounds_done),
                "round_s": statistics.mean(r["round_s"] for r in rounds_done),
                "schedule_ms": 1e3 * statistics.mean(r["time_schedule_s"] for r in rounds_done),
                "share": statistics.mean(r["time_schedule_s"] / r["round_s"] for r in rounds_done),
                "crashed": crashed})
    return rows


def schedule_cost(sizes: list[int], repeats: int) -> list[dict]:
    """Mean seconds of NetworkSchedule.at(t) (and of the round record with its SVD) per round."""
    import topologies
    from p2pfl.network import NetworkSchedule

    out = []
    for n in sizes:
        kinds = {
            "cycle, q=0.2": NetworkSchedule(n, graph=topologies.build("cycle", n), link_failure=0.2),
            "cycle, crash+churn": NetworkSchedule(n, graph=topologies.build("cycle", n), churn=0.1,
                                                  crashes={1: 2, 5: 3}),
            "resample p=0.3": NetworkSchedule(n, resample_p=min(1.0, 0.3 if n < 100 else 8 / n)),
            "random-matching": NetworkSchedule(n, dynamic=topologies.DYNAMIC["random-matching"]),
            "one-peer-exponential": NetworkSchedule(n, dynamic=topologies.DYNAMIC["one-peer-exponential"]),
        }
        for name, sched in kinds.items():
            t0 = time.perf_counter()
            for t in range(1, repeats + 1):
                net = sched.at(t)
            at_s = (time.perf_counter() - t0) / repeats
            t0 = time.perf_counter()
            for _ in range(repeats):
                net.record(spectral=n <= 256)
            out.append({"peers": n, "kind": name, "at_ms": 1e3 * at_s,
                        "record_ms": 1e3 * (time.perf_counter() - t0) / repeats})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/network-faults")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--train-subset", type=int, default=60000)
    parser.add_argument("--peers", type=int, default=20)
    parser.add_argument("--alpha", type=float, default=0.5, help="Dirichlet concentration of the partition")
    parser.add_argument("--local-steps", type=int, default=10, help="local SGD steps per round (0: one epoch)")
    parser.add_argument("--schedule-only", action="store_true")
    args = parser.parse_args()
    print("| peers | kind | at(t) ms | record ms |\n|---|---|---|---|")
    for row in schedule_cost([20, 100, 500], repeats=20):
        print(f"| {row['peers']} | {row['kind']} | {row['at_ms']:.3f} | {row['record_ms']:.3f} |")
    if args.schedule_only:
        return
    train = ["--alpha", str(args.alpha)] + (["--local-steps", str(args.local_steps)] if args.local_steps else [])
    rows = run_study(Path(args.out), [int(s) for s in args.seeds.split(",")], args.rounds, args.train_subset,
                     args.peers, train)
    print("\n| config | seed | acc (avg model) | acc peers mean | acc peers min | consensus dist | links/round "
          "| round s | schedule ms | schedule share | crashed |\n|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['config']} | {r['seed']} | {r['acc_avg']:.4f} | {r['acc_peer_mean']:.4f} | "
              f"{r['acc_peer_min']:.4f} | {r['consensus']:.4g} | {r['links']:.1f} | {r['round_s']:.2f} | "
              f"{r['schedule_ms']:.3f} | {100 * r['share']:.4f}% | {r['crashed']} |")


if __name__ == "__main__":
    main()
