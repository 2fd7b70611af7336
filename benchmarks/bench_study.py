"""The study runner's overhead per point: a study of N tiny points (one at a time) against the same p2pfl.run
commands run directly one after the other, interleaved, in one process.

    python benchmarks/bench_study.py [--points 6] [--repeats 2] [--slurm]

Overhead per point = (study wall time − direct wall time) / N (target: under 2 s locally). With --slurm (root,
the test cluster's packages installed) the same study is also submitted as a job array to a one-node Slurm
started for the purpose, and its overhead per point measured from submission to the last task's end
(target: under 5 s).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from p2pfl.study.folder import StudyFolder  # noqa: E402
from p2pfl.study.local import point_command  # noqa: E402
from p2pfl.study.plan import expand  # noqa: E402

TINY = {"algorithm": "consensus", "vector_size": 100, "rounds": 2, "peers": 4, "eval_every": 0, "plots": False}


def study_file(tmp: Path, n: int, tag: str) -> Path:
    path = tmp / f"{tag}.yaml"
    path.write_text(yaml.safe_dump({"name": tag, "base": TINY, "axes": {"seed": list(range(n))}}))
    return path


def time_study(tmp: Path, n: int, tag: str) -> float:
    path = study_file(tmp, n, tag)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "p2pfl.study", str(path), "--out", str(tmp), "--jobs", "1"],
                   cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - t0


def time_direct(tmp: Path, n: int, tag: str) -> float:
    plan = expand(yaml.safe_load(study_file(tmp, n, tag).read_text()))
    folder = StudyFolder(tmp / tag)
    folder.write_plan(plan, "")
    t0 = time.perf_counter()
    for point in plan.points:
        subprocess.run(point_command(folder, point.name, ranks=1), cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - t0


def time_slurm(tmp: Path, n: int) -> float:
    sys.path.insert(0, str(ROOT / "tests"))
    from slurm_cluster import SlurmCluster  # the tests' one-node cluster

    cluster = SlurmCluster()
    cluster.start()
    try:
        path = study_file(tmp, n, "slurm")
        env = {**os.environ, **cluster.env, "P2PFL_VENV": str(Path(sys.executable).parent.parent)}
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "p2pfl.study", str(path), "--out", str(tmp), "--slurm",
                              "--throttle", "1"], cwd=ROOT, env=env, check=True, capture_output=True, text=True)
        job = int(out.stdout.split("job array ")[1].split()[0])
        cluster.wait(job, timeout=600)
        return time.perf_counter() - t0
    finally:
        cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--slurm", action="store_true")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-study-"))
    study, direct = [], []
    try:
        for r in range(args.repeats):
            direct.append(time_direct(tmp, args.points, f"direct{r}"))
            study.append(time_study(tmp, args.points, f"study{r}"))
        s, d = min(study), min(direct)
        print(f"{args.points} tiny points, one at a time, best of {args.repeats}:")
        print(f"  direct p2pfl.run loop {d:7.2f} s  ({d / args.points:.2f} s per point)")
        print(f"  study runner          {s:7.2f} s  ({s / args.points:.2f} s per point)")
        print(f"  overhead per point    {(s - d) / args.points:7.2f} s  (target < 2 s)")
        if args.slurm:
            w = time_slurm(tmp, args.points)
            print(f"  Slurm array (throttle 1) {w:7.2f} s; overhead per point {(w - d) / args.points:.2f} s "
                  "(target < 5 s)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
