"""The decentralised optimisers side by side: the cost of a round and the bytes sent under every --gossip scheme,
against `average`, on the same problem in the same run.

    python benchmarks/bench_schemes.py                                  # quadratic, d = 1,000,000, 16 peers
    python benchmarks/bench_schemes.py --ranks 4                        # the same under mpirun -n 4
    python benchmarks/bench_schemes.py --problem fedavg                 # simple CNN on Fashion-MNIST

Each scheme runs as its own `python -m p2pfl.run` on a cycle of `--peers` peers (relay on the cycle's BFS spanning
tree), float64 for the quadratic problem, the schemes interleaved over `--repeats` passes so that a machine's
drift touches them alike. Reported per scheme: the median round time over the repeats' rounds (round 1, which
warms up, left out) and its ratio to average's; the communication share of it (time_comm_s / round_s); the bytes
a peer sends per round (mean over peers and rounds, from the round records) and their ratio to average's. A
scheme that sends two vectors (gradient tracking) or a vector and a weight (push-sum) is counted as it travels.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analysis.runs import load_run  # noqa: E402
from p2pfl.gossip.schemes import SCHEMES  # noqa: E402

PROBLEMS: dict[str, list[str]] = {
    "quadratic": ["--algorithm", "quadratic", "--dtype", "float64", "--lr", "0.05",
                  "--momentum", "0.9"],
    "fedavg": ["--algorithm", "fedavg", "--dataset", "fashion-mnist", "--train-subset", "4000", "--optimizer", "sgd",
               "--momentum", "0.9", "--local-steps", "1"],  # --momentum: qgm's μ (its local steps take none)
}


def command(problem: str, scheme: str, peers: int, rounds: int, dim: int, ranks: int, out: Path,
            name: str) -> list[str]:
    """The run of one scheme (under mpirun when `ranks` > 1)."""
    args = [sys.executable, "-m", "p2pfl.run", *PROBLEMS[problem], "--gossip", scheme, "--topology", "cycle",
            "--peers", str(peers), "--rounds", str(rounds), "--eval-every", "0", "--out", str(out), "--name", name,
            "--no-progress", "--no-plots"]
    if problem == "quadratic":
        args += ["--dim", str(dim)]
    return ["mpirun", "-n", str(ranks), *args] if ranks > 1 else args


def measure(run_dir: Path) -> dict[str, list[float]]:
    """Per round after the first: seconds, communication seconds and bytes a peer sent."""
    rounds = [r for r in load_run(run_dir).rounds if r["round"] > 1]
    return {"round_s": [r["round_s"] for r in rounds], "comm_s": [r["time_comm_s"] for r in rounds],
            "bytes": [r["bytes_sent"] / max(1, len(r["bytes_sent_per_peer"])) for r in rounds]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", choices=sorted(PROBLEMS), default="quadratic")
    parser.add_argument("--peers", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--dim", type=int, default=1_000_000, help="the quadratic problem's d")
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--schemes", default=",".join(SCHEMES))
    args = parser.parse_args(argv)
    schemes = args.schemes.split(",")
    found: dict[str, dict[str, list[float]]] = {s: {"round_s": [], "comm_s": [], "bytes": []} for s in schemes}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            for scheme in schemes:
                name = f"{scheme}-{rep}"
                subprocess.run(command(args.problem, scheme, args.peers, args.rounds, args.dim, args.ranks, Path(tmp),
                                       name), check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
                for key, values in measure(Path(tmp) / name).items():
                    found[scheme][key] += values
    base = {k: statistics.median(v) for k, v in found["average"].items()} if "average" in found else None
    size = f"d = {args.dim:,}, float64" if args.problem == "quadratic" else "simple CNN"
    print(f"{args.problem} ({size}), cycle of {args.peers} peers on {args.ranks} rank(s), {args.rounds} rounds x "
          f"{args.repeats} repeats; medians of rounds 2..{args.rounds}")
    print(f"  {'scheme':<18} {'round':>10} {'vs average':>10} {'comm share':>10} {'bytes/peer':>12} {'vs average':>10}")
    for scheme in schemes:
        med = {k: statistics.median(v) for k, v in found[scheme].items()}
        ratio = f"{med['round_s'] / base['round_s']:.2f}x" if base else "-"
        bytes_ratio = f"{med['bytes'] / base['bytes']:.3f}x" if base else "-"
        print(f"  {scheme:<18} {med['round_s'] * 1e3:8.1f} ms {ratio:>10} {med['comm_s'] / med['round_s']:>10.1%} "
              f"{med['bytes'] / 2 ** 20:9.2f} MiB {bytes_ratio:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
