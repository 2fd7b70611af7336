"""Throughput of the default Dec-SSL job: peer-epochs per second and the share of a round spent outside local
training (exchange, mixing, consensus distance, logging; target under 10%).

    python benchmarks/bench_dec_ssl.py [--ranks 20] [--rounds 3] [-- extra p2pfl.run flags]

Launches the default job (`mpirun -n RANKS python -m p2pfl.run --topology cycle`) for a few rounds and reads
its metrics.jsonl; evaluation time is not counted.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from p2pfl.runtime.files import loads

ROOT = Path(__file__).resolve().parent.parent


def measure(run_dir: Path, local_epochs: float) -> dict:
    rounds = [loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rounds = [r for r in rounds if r["type"] == "round" and r["round"] > 0]
    peers = len(rounds[0]["active"])
    wall = sum(r["round_s"] for r in rounds)
    local = sum(r["time_local_s"] for r in rounds)
    return {"rounds": len(rounds), "peers": peers, "round_s_mean": wall / len(rounds),
            "peer_epochs_per_s": peers * local_epochs * len(rounds) / wall,
            "share_outside_local_training": 1 - local / wall,
            "comm_s_mean": sum(r["time_comm_s"] + r["time_wait_s"] for r in rounds) / len(rounds)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    parser.add_argument("extra", nargs="*")
    args = parser.parse_args()
    mpirun = Path(sys.executable).parent / "mpirun"
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [str(mpirun), "-n", str(args.ranks), sys.executable, "-m", "p2pfl.run", "--topology", "cycle",
               "--rounds", str(args.rounds), "--out", tmp, "--name", "bench", "--no-progress", "--no-plots",
               "--probe-epochs", "1", *args.extra]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
        subprocess.run(cmd, check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
        result = measure(Path(tmp) / "bench", local_epochs=1.0)
    print(f"{result['peers']} peers on {args.ranks} ranks, {result['rounds']} rounds: "
          f"{result['round_s_mean']:.1f} s/round, {result['peer_epochs_per_s']:.2f} peer-epochs/s, "
          f"{100 * result['share_outside_local_training']:.1f}% of a round outside local training "
          f"(exchange+wait {result['comm_s_mean']:.2f} s/round)")
    if args.json:
        Path(args.json).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
