"""How many global collectives (World.barrier/bcast/gather/allgather/allreduce) one round of a --gossip scheme makes.

    python benchmarks/collectives.py                          # average, gradient-tracking, choco on 4 peers, 2 ranks
    python benchmarks/collectives.py --schemes d2 relay "choco --compress qsgd" --ranks 4

Each scheme runs `--algorithm quadratic` (or --algorithm consensus with --consensus) under `mpirun -n RANKS` twice,
for R and R + 1 rounds (no evaluation before the last round, nothing written between), with every World collective
counted on rank 0 by the function that called it; a round's count is the difference of the two runs (set-up and
the final evaluation cancel). The exchanges' point-to-point messages are not counted: only what every rank must
meet at.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(os.environ.get("P2PFL_ROOT", Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(ROOT))

COMMON = ["--peers", "4", "--topology", "cycle", "--eval-every", "0", "--no-progress", "--no-plots"]
PROBLEMS = {"quadratic": ["--algorithm", "quadratic", "--dim", "10", "--lr", "0.05"],
            "consensus": ["--algorithm", "consensus", "--vector-size", "10"]}


def worker(argv: list[str]) -> None:
    """Run p2pfl.run with World's collectives counted; rank 0 prints the counts as one JSON line."""
    from p2pfl import run
    from p2pfl.comm.world import World

    counts: collections.Counter[str] = collections.Counter()
    guarded = World._guarded

    def counted(self: World, call: str, caller: str | None, collective):  # noqa: ANN001, ANN202
        name = caller or sys._getframe(2).f_code.co_name
        counts[f"{call} from {name}"] += 1
        return guarded(self, call, name, collective)

    World._guarded = counted  # type: ignore[method-assign]
    world = World.detect()
    run.main(argv)
    if world.is_root:
        print("COUNTS " + json.dumps(dict(counts)), flush=True)


def measure(problem: str, scheme: str, ranks: int, rounds: int) -> dict[str, int]:
    """Collectives per round of `scheme` (its name and flags; by call and caller): rounds + 1 less rounds."""
    mpirun = Path(sys.executable).parent / "mpirun"
    got = []
    with tempfile.TemporaryDirectory() as out:
        for r in (rounds, rounds + 1):
            args = [*PROBLEMS[problem], *COMMON, "--gossip", *scheme.split(), "--rounds", str(r), "--out", out,
                    "--name", f"run-{r}"]
            cmd = [str(mpirun if mpirun.exists() else "mpirun"), "-n", str(ranks), sys.executable, __file__,
                   "--worker", *args]
            proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
            if proc.returncode != 0:
                raise SystemExit(proc.stderr[-3000:])
            line = next(x for x in proc.stdout.splitlines() if x.startswith("COUNTS "))
            got.append(collections.Counter(json.loads(line[len("COUNTS "):])))
    diff = got[1]
    diff.subtract(got[0])
    return {k: v for k, v in sorted(diff.items()) if v}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schemes", nargs="+",
                        default=["average", "gradient-tracking", "choco", "choco --compress top-k"],
                        help="schemes, each with its own flags if any (one argument: 'choco --compress top-k')")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--consensus", action="store_true", help="--algorithm consensus instead of quadratic")
    args = parser.parse_args()
    problem = "consensus" if args.consensus else "quadratic"
    for scheme in args.schemes:
        per_round = measure(problem, scheme, args.ranks, args.rounds)
        print(f"{scheme}: {sum(per_round.values())} global collectives a round ({problem}, 4 peers, {args.ranks} "
              f"ranks): {json.dumps(per_round)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
