"""How set-up, a round and memory grow with the number of peers K, side by side in one run.

    python benchmarks/bench_scale.py                          # the issue's grid (about 6 minutes on 2 cores)
    python benchmarks/bench_scale.py --peers 100 1000 --ranks 1 --skip-fedavg
    python benchmarks/bench_scale.py --peers 100000 --ranks 2 --algorithms consensus

Each case is `python -m p2pfl.run` (under `mpirun -n R` for R > 1) on the random graph G(K, p) with mean degree
about 10 (p = 10 / K), Metropolis weights, 5 rounds, evaluated at the end only, no plots, one torch thread per
rank:
  - consensus and quadratic with d = 100, for every K of --peers and every R of --ranks;
  - fedavg (the simple CNN, SGD, one local step at batch 32, synthetic 32 × 32 images, 32 a peer) at K = 1,000
    on 2 ranks, every peer evaluated at the end.
Reported per case, from the run folder: set-up seconds (summary.json's `setup_s`: the command's start, imports
aside, to its first round, on the slowest rank), seconds per round (the mean of the round records' `round_s`),
the peak resident memory of the largest rank (manifest.json's memory_peak), and the command's wall seconds.
Then for each algorithm and R, the growth from the smallest K above 100 to the largest: cost(K2) / cost(K1)
against K2 log K2 / (K1 log K1), the bound the issue sets (a ratio below 1 grows slower than K log K).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from p2pfl.runtime.files import loads

ROOT = Path(__file__).resolve().parent.parent
MEAN_DEGREE = 10.0
ROUNDS = 5


def launcher(ranks: int) -> list[str]:
    """`mpirun -n R` (the mpich wheel's beside this interpreter, else PATH's) for R > 1, nothing for one rank."""
    if ranks <= 1:
        return []
    local = Path(sys.executable).parent / "mpirun"
    return [str(local) if local.exists() else "mpirun", "-n", str(ranks)]


def case_args(algorithm: str, peers: int, device: str = "cpu") -> list[str]:
    """The options of one case (module docstring)."""
    p = min(1.0, MEAN_DEGREE / peers)
    common = ["--algorithm", algorithm, "--peers", str(peers), "--rounds", str(ROUNDS), "--topology", "random",
              "--p", f"{p:.6g}", "--eval-every", "0", "--no-plots", "--no-progress", "--threads", "1",
              "--device", device]
    if algorithm == "consensus":
        return [*common, "--vector-size", "100"]
    if algorithm == "quadratic":
        return [*common, "--dim", "100"]
    if algorithm == "fedavg":
        return [*common, "--dataset", "synthetic", "--train-subset", str(32 * peers), "--partition", "iid",
                "--model", "simple-cnn", "--optimizer", "sgd", "--lr", "0.05", "--local-steps", "1",
                "--batch-size", "32", "--min-size", "0"]
    raise ValueError(f"unknown case {algorithm!r}")


def run_case(algorithm: str, peers: int, ranks: int, out: Path, timeout: float, device: str = "cpu") -> dict:
    """One case's figures (module docstring); `failed` instead when the run did not finish."""
    name = f"{algorithm}-{peers}-{ranks}"
    cmd = [*launcher(ranks), sys.executable, "-m", "p2pfl.run", *case_args(algorithm, peers, device), "--out", str(out),
           "--name", name]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"algorithm": algorithm, "peers": peers, "ranks": ranks, "failed": f"over {timeout:g} s"}
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"algorithm": algorithm, "peers": peers, "ranks": ranks,
                "failed": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]}
    folder = out / name
    summary = loads((folder / "summary.json").read_text())
    manifest = json.loads((folder / "manifest.json").read_text())
    rounds = [loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    round_s = [r["round_s"] for r in rounds if r.get("type") == "round" and r["round"] >= 1]
    return {"algorithm": algorithm, "peers": peers, "ranks": ranks, "setup_s": summary["setup_s"],
            "round_s": sum(round_s) / len(round_s), "peak_mib": manifest["memory_peak"]["max_bytes"] / 2**20,
            "wall_s": wall}


def growth(rows: list[dict]) -> list[str]:
    """Per (algorithm, ranks): cost(K2)/cost(K1) against the K log K ratio, K1 the smallest K above 100."""
    lines = []
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        if "failed" not in r:
            groups.setdefault((r["algorithm"], r["ranks"]), []).append(r)
    for (algorithm, ranks), got in sorted(groups.items()):
        got = sorted(got, key=lambda r: r["peers"])
        low = next((r for r in got if r["peers"] > 100), None)
        high = got[-1]
        if low is None or high is low:
            continue
        k1, k2 = low["peers"], high["peers"]
        bound = k2 * math.log(k2) / (k1 * math.log(k1))
        for key in ("setup_s", "round_s"):
            ratio = high[key] / low[key]
            lines.append(f"{algorithm:9s} R={ranks} {key:8s} K {k1} -> {k2}: x{ratio:6.2f} against K log K "
                         f"x{bound:6.2f} ({ratio / bound:.2f} of it)")
    return lines


def table(rows: list[dict]) -> str:
    head = f"{'case':24s} {'setup s':>9s} {'s/round':>9s} {'peak MiB':>9s} {'wall s':>8s}"
    lines = [head, "-" * len(head)]
    for r in rows:
        label = f"{r['algorithm']} K={r['peers']} R={r['ranks']}"
        if "failed" in r:
            lines.append(f"{label:24s} failed: {r['failed']}")
        else:
            lines.append(f"{label:24s} {r['setup_s']:9.2f} {r['round_s']:9.3f} {r['peak_mib']:9.0f} "
                         f"{r['wall_s']:8.1f}")
    return "\n".join(lines)


def gossip_sums(repeats: int = 3) -> list[str]:
    """The stacked gossip sum (p2pfl.gossip.rules.stacked_sums) against the one-receiver loop (weighted_sum) on
    the same rows: receivers with 5 random neighbours and their own vector, equal weights, float32; the best of
    `repeats`. Sets p2pfl.gossip.rules.STACK_MAX_CPU."""
    import random

    import torch

    sys.path.insert(0, str(ROOT))
    from p2pfl.gossip.rules import stacked_sums, weighted_sum

    torch.set_num_threads(1)
    rng = random.Random(0)
    lines = []
    for numel, k in ((100, 2000), (1024, 2000), (4096, 1000), (65536, 300)):
        own = {p: torch.randn(numel) for p in range(k)}
        rows, inbox = {}, {}
        for p in range(k):
            heard = sorted(rng.sample([q for q in range(k) if q != p], 5))
            rows[p] = [(j, 1 / 6) for j in sorted([*heard, p])]
            inbox[p] = {q: own[q] for q in heard}
        best = {"stacked": math.inf, "loop": math.inf}
        for _ in range(repeats):
            t0 = time.perf_counter()
            stacked_sums(own, inbox, rows)
            t1 = time.perf_counter()
            for p in rows:
                weighted_sum(own[p], inbox[p], rows[p])
            t2 = time.perf_counter()
            best = {"stacked": min(best["stacked"], t1 - t0), "loop": min(best["loop"], t2 - t1)}
        lines.append(f"gossip sums d={numel:6d} K={k:5d}: stacked {best['stacked'] * 1e3:8.1f} ms, one receiver at a "
                     f"time {best['loop'] * 1e3:8.1f} ms (stacked/loop {best['stacked'] / best['loop']:.2f})")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers", type=int, nargs="+", default=[100, 1000, 10000])
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--algorithms", nargs="+", default=["consensus", "quadratic"])
    ap.add_argument("--skip-fedavg", action="store_true", help="leave out fedavg at K = 1,000 on 2 ranks")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds a case may take")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    ap.add_argument("--device", default="cpu", help="the runs' --device (cpu, cuda)")
    args = ap.parse_args()
    print("\n".join(gossip_sums()), flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = [(a, k, r) for a in args.algorithms for k in args.peers for r in args.ranks]
        if not args.skip_fedavg:
            cases.append(("fedavg", 1000, 2))
        for algorithm, peers, ranks in cases:
            rows.append(run_case(algorithm, peers, ranks, Path(tmp), args.timeout, args.device))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(table(rows))
    print()
    print("\n".join(growth(rows)))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
