"""Seconds per local epoch of MOON next to FedAvg, through the real local-trainer code path.

    python benchmarks/bench_moon.py [--images 1000] [--models simple-cnn,resnet18] [--devices cpu,cuda]
                                    [--repeats 2] [--threads 1] [--json OUT]

One peer holds a shard of `--images` CIFAR-sized (3×32×32) synthetic images; batch 64, SGD. The first local
epoch (a warm-up; for MOON also the epoch that creates the previous model) is not timed; then `--repeats`
epochs are, and the table shows their median. MOON's epoch carries two extra forward passes per batch (the
round's start model and the previous model, in eval mode without gradients), so its ratio to FedAvg is
expected a little under 2x for a forward-heavy small CNN and around 1.5x where backward dominates.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from p2pfl.comm.world import World  # noqa: E402
from p2pfl.config import make_config, resolve  # noqa: E402
from p2pfl.run import build_algorithm, build_context  # noqa: E402


def epoch_seconds(algorithm: str, model: str, device: str, images: int, repeats: int, threads: int,
                  out: str) -> list[float]:
    """Wall seconds of each timed local epoch of peer 0 (after one untimed warm-up epoch)."""
    cfg = make_config(algorithm=algorithm, model=model, device=device, dataset="synthetic", peers=2,
                      partition="iid", train_subset=2 * images, topology="complete", optimizer="sgd", lr=0.01,
                      momentum=0.9, weight_decay=1e-5, batch_size=64, local_epochs=1, threads=threads, out=out,
                      progress=False, plots=False)
    world = World.detect()
    algo = build_algorithm(build_context(world, resolve(cfg, world.size), announce=False))
    sync = torch.cuda.synchronize if algo.ctx.device.type == "cuda" else (lambda: None)
    algo.local_update(0, 1)
    times = []
    for r in range(repeats):
        sync()
        t0 = time.perf_counter()
        algo.local_update(0, r + 2)
        sync()
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--models", default="simple-cnn,resnet18")
    parser.add_argument("--devices", default="cpu,cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as out:
        for device in args.devices.split(","):
            for model in args.models.split(","):
                t = {a: statistics.median(epoch_seconds(a, model, device, args.images, args.repeats, args.threads, out))
                     for a in ("fedavg", "moon")}
                rows.append({"device": device, "model": model, "images": args.images, "threads": args.threads,
                             "fedavg_s": t["fedavg"], "moon_s": t["moon"], "ratio": t["moon"] / t["fedavg"]})
                print(f"  done {device} {model}", file=sys.stderr, flush=True)
    print(f"seconds per local epoch, {args.images} images of 3x32x32, batch 64, SGD, {args.threads} thread(s), "
          f"median of {args.repeats}")
    print(f"{'device':<7} {'model':<11} {'fedavg s':>9} {'moon s':>9} {'moon/fedavg':>12}")
    for r in rows:
        print(f"{r['device']:<7} {r['model']:<11} {r['fedavg_s']:>9.3f} {r['moon_s']:>9.3f} {r['ratio']:>12.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
