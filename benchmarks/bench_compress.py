"""Compressed gossip side by side: what each --compress codec costs to encode and decode, the message it sends,
and the round time it gives on 4 ranks, against the dense exchange, in the same run.

    python benchmarks/bench_compress.py                              # d = 11.2M float32; codecs, then 4-rank runs
    python benchmarks/bench_compress.py --dim 1000000 --rounds 3     # smaller
    python benchmarks/bench_compress.py --no-runs                    # the codecs alone

(a) The codecs on one d-vector of float32 (standard normal, one torch thread, like one rank's peer): top-k and
random-k at each --ratios ρ, qsgd at --levels s, sign, and the identity codec of --compress none. Each codec's
encode (peer 0) and decode are timed --repeats times, the codecs interleaved in every pass so that a machine's drift
touches them alike; reported: the medians, their sum and its ratio to a copy of the dense vector (the least the
dense exchange does with it: the identity codec itself sends the tensor as it is, in no time), and the message
bytes and their ratio to dense float32 (4d bytes).

(b) `mpirun -n --ranks python -m p2pfl.run --algorithm consensus --vector-size d` on a cycle of --peers peers for
--rounds rounds under --gossip average, once per codec and with --compress none, interleaved over --run-repeats
passes; reported: the median round time of rounds 2.. (round 1 warms up) and its ratio to none's, and the bytes a
peer sends per round (mean over peers and rounds, from the round records) and their ratio to none's.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analysis.runs import load_run  # noqa: E402
from p2pfl.cli import parse_args  # noqa: E402
from p2pfl.gossip.compress import make  # noqa: E402


def codecs(ratios: list[float], levels: int) -> list[tuple[str, list[str]]]:
    """(label, the --compress options) of every codec measured, --compress none first."""
    found = [("none", ["--compress", "none"])]
    for name in ("top-k", "random-k"):
        found += [(f"{name} ρ={r:g}", ["--compress", name, "--compress-ratio", str(r)]) for r in ratios]
    return found + [(f"qsgd s={levels}", ["--compress", "qsgd", "--qsgd-levels", str(levels)]),
                    ("sign", ["--compress", "sign"])]


def build(options: list[str], seed: int):
    """The codec `options` (--compress NAME [--compress-ratio ρ | --qsgd-levels s]) name."""
    return make(parse_args([*options, "--algorithm", "consensus", "--seed", str(seed)])[0])


def timed(fn, *args) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def bench_codecs(labels: list[tuple[str, list[str]]], dim: int, repeats: int, seed: int) -> None:
    vector = torch.randn(dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float32)
    dense_bytes = 4 * dim
    built = {label: build(options, seed) for label, options in labels}
    found = {label: {"encode": [], "decode": []} for label in [*built, "copy"]}
    sizes = {}
    for rep in range(repeats):
        for label, codec in built.items():
            enc, payload = timed(codec.encode, 0, vector, rep + 1)
            dec, back = timed(codec.decode, 0, payload, rep + 1)
            assert back.shape == vector.shape and back.dtype == vector.dtype
            found[label]["encode"].append(enc)
            found[label]["decode"].append(dec)
            sizes[label] = payload.numel() * payload.element_size()
            del payload, back
        found["copy"]["encode"].append(timed(vector.clone)[0])
        found["copy"]["decode"].append(0.0)
    copy = statistics.median(found["copy"]["encode"])
    print(f"(a) codecs on d = {dim:,} float32, {torch.get_num_threads()} torch thread(s), medians of {repeats} "
          f"interleaved repeats; dense copy of the vector {copy * 1e3:.1f} ms, dense message {dense_bytes:,} B")
    print(f"  {'codec':<16} {'encode':>10} {'decode':>10} {'enc+dec':>10} {'vs copy':>9} {'message':>14} "
          f"{'vs dense':>9}")
    for label in built:
        enc, dec = (statistics.median(found[label][k]) for k in ("encode", "decode"))
        print(f"  {label:<16} {enc * 1e3:7.1f} ms {dec * 1e3:7.1f} ms {(enc + dec) * 1e3:7.1f} ms "
              f"{(enc + dec) / copy:8.1f}x {sizes[label]:12,} B {sizes[label] / dense_bytes:8.2%}")


def command(options: list[str], dim: int, peers: int, rounds: int, ranks: int, out: Path, name: str) -> list[str]:
    """The consensus run of one codec (under mpirun when `ranks` > 1)."""
    args = [sys.executable, "-m", "p2pfl.run", "--algorithm", "consensus", "--vector-size", str(dim), "--gossip",
            "average", *options, "--topology", "cycle", "--peers", str(peers), "--rounds", str(rounds),
            "--eval-every", "0", "--out", str(out), "--name", name, "--no-progress", "--no-plots"]
    return [str(Path(sys.executable).parent / "mpirun") if (Path(sys.executable).parent / "mpirun").exists()
            else "mpirun", "-n", str(ranks), *args] if ranks > 1 else args


def measure(run_dir: Path) -> dict[str, list[float]]:
    """Per round after the first: seconds and bytes a peer sent."""
    rounds = [r for r in load_run(run_dir).rounds if r["round"] > 1]
    return {"round_s": [r["round_s"] for r in rounds],
            "bytes": [r["bytes_sent"] / max(1, len(r["bytes_sent_per_peer"])) for r in rounds]}


def bench_runs(labels: list[tuple[str, list[str]]], dim: int, peers: int, rounds: int, ranks: int,
               repeats: int) -> None:
    found = {label: {"round_s": [], "bytes": []} for label, _ in labels}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(repeats):
            for i, (label, options) in enumerate(labels):
                name = f"c{i}-{rep}"
                subprocess.run(command(options, dim, peers, rounds, ranks, Path(tmp), name), check=True, cwd=ROOT,
                               stdout=subprocess.DEVNULL)
                for key, values in measure(Path(tmp) / name).items():
                    found[label][key] += values
    base = {k: statistics.median(v) for k, v in found["none"].items()}
    print(f"(b) consensus, d = {dim:,} float32, --gossip average, cycle of {peers} peers on {ranks} rank(s), "
          f"{rounds} rounds x {repeats} repeat(s); medians of rounds 2..{rounds}")
    print(f"  {'codec':<16} {'round':>10} {'vs none':>9} {'bytes/peer/round':>18} {'vs none':>9}")
    for label, _ in labels:
        med = {k: statistics.median(v) for k, v in found[label].items()}
        print(f"  {label:<16} {med['round_s'] * 1e3:7.0f} ms {med['round_s'] / base['round_s']:8.2f}x "
              f"{med['bytes'] / 2 ** 20:14.2f} MiB {med['bytes'] / base['bytes']:8.2%}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=11_200_000, help="floats per vector (consensus --vector-size)")
    parser.add_argument("--ratios", default="0.1,0.01", help="top-k and random-k ρ values, comma-separated")
    parser.add_argument("--levels", type=int, default=4, help="qsgd's s")
    parser.add_argument("--repeats", type=int, default=5, help="passes over the codecs in (a)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads in (a)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", action=argparse.BooleanOptionalAction, default=True, help="(b), the 4-rank runs")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--peers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--run-repeats", type=int, default=1, help="passes over the codecs in (b)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    labels = codecs([float(r) for r in args.ratios.split(",")], args.levels)
    bench_codecs(labels, args.dim, args.repeats, args.seed)
    if args.runs:
        bench_runs(labels, args.dim, args.peers, args.rounds, args.ranks, args.run_repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
