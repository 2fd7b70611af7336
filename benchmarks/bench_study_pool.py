"""Points per minute of a local study: its one-rank points in the worker pool (the default) against each point its
own `python -m p2pfl.run` process (--isolate, the runner before the pool), on the same 24-point consensus study,
alternated per repeat, side by side.

    python benchmarks/bench_study_pool.py [--points 24] [--jobs 2] [--repeats 1]

Each measurement is one `python -m p2pfl.study` command from start to its exit (the driver's own imports and the
workers' included), on a fresh study folder. The records of both are checked equal (tests/test_study_pool.py
checks them field by field).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
#: A short consensus job: the kind of point whose time the imports dominate.
POINT = {"algorithm": "consensus", "vector_size": 1000, "rounds": 20, "peers": 8, "eval_every": 0, "plots": False}


def time_study(tmp: Path, points: int, jobs: int, isolate: bool, tag: str) -> float:
    """Seconds of one study command over `points` seeds."""
    path = tmp / f"{tag}.yaml"
    path.write_text(yaml.safe_dump({"name": tag, "base": POINT, "axes": {"seed": list(range(points))}}))
    cmd = [sys.executable, "-m", "p2pfl.study", str(path), "--out", str(tmp), "--jobs", str(jobs)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    subprocess.run([*cmd, "--isolate"] if isolate else cmd, cwd=ROOT, env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def same_records(tmp: Path, a: str, b: str, points: int) -> bool:
    """Whether the two studies' metrics.jsonl agree on every record (timing fields aside)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from golden_cases import normalise

    return all(normalise(tmp / a / "runs" / f"seed-{s}" / "metrics.jsonl")
               == normalise(tmp / b / "runs" / f"seed-{s}" / "metrics.jsonl") for s in range(points))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=int, default=24)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    rows = {"subprocess (--isolate)": [], "worker pool": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for label, isolate in (("subprocess (--isolate)", True), ("worker pool", False)):
                tag = f"{'iso' if isolate else 'pool'}{r}"
                rows[label].append(time_study(Path(tmp), args.points, args.jobs, isolate, tag))
        equal = same_records(Path(tmp), "iso0", "pool0", args.points)
    print(f"{args.points} consensus points ({POINT['peers']} peers, {POINT['rounds']} rounds, vector "
          f"{POINT['vector_size']}), {args.jobs} at once, {os.cpu_count()} cores; records equal: {equal}")
    print(f"{'runner':<24}{'wall s (each repeat)':>28}{'points/min (best)':>20}")
    for label, walls in rows.items():
        print(f"{label:<24}{', '.join(f'{w:.1f}' for w in walls):>28}{60 * args.points / min(walls):>20.1f}")
    ratio = min(rows["subprocess (--isolate)"]) / min(rows["worker pool"])
    print(f"pool / subprocess: {ratio:.1f}x the points per minute")


if __name__ == "__main__":
    main()
