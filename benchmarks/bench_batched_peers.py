"""Peer-epochs per second of one rank's co-located peers: the peer-by-peer loop next to --batch-peers on.

    P2PFL_DATA=... python benchmarks/bench_batched_peers.py [--peers 20,100] [--models simple-cnn,resnet-small]
        [--algorithm dec-ssl] [--images 64] [--batch-size 32] [--device cpu] [--threads 1] [--repeats 2]
        [--json OUT]

Every peer holds `--images` Fashion-MNIST images (an iid cut of the first peers × images) and does one local
epoch per round, through the real code path (`LocalTrainer.local_updates`, augmentation included). Per
configuration the two modes run side by side in one process: a warm-up round each, then `--repeats` rounds
each, alternating, and the table shows the best round of each mode (the machine's other load only slows a
round down). The evaluation is timed too: one final scoring of every peer (features, linear probe) per mode.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from p2pfl.comm.world import World  # noqa: E402
from p2pfl.config import make_config, resolve  # noqa: E402
from p2pfl.run import build_algorithm, build_context  # noqa: E402
from p2pfl.runtime.allocator import keep_freed_memory  # noqa: E402
from p2pfl.runtime.device import configure_determinism  # noqa: E402


def build(mode: str, peers: int, model: str, args: argparse.Namespace, out: Path):
    cfg = make_config(algorithm=args.algorithm, dataset="fashion-mnist", peers=peers, model=model,
                      partition="iid", train_subset=peers * args.images, batch_size=args.batch_size,
                      local_epochs=1.0, rounds=10, batch_peers=mode, device=args.device, threads=args.threads,
                      probe_epochs=args.probe_epochs, progress=False, plots=False, out=str(out))
    world = World.detect()
    return build_algorithm(build_context(world, resolve(cfg, world.size), announce=False))


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_round(algo, t: int, device: str) -> float:
    net = algo.ctx.schedule.at(t)
    sync(device)
    start = time.perf_counter()
    algo.local_updates(sorted(algo.peers), t, net)
    sync(device)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--peers", default="20,100")
    parser.add_argument("--models", default="simple-cnn,resnet-small")
    parser.add_argument("--algorithm", default="dec-ssl")
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--probe-epochs", type=int, default=5)
    parser.add_argument("--no-eval", action="store_true", help="time training only")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    configure_determinism(args.threads, torch.device(args.device))  # as p2pfl.run: TF32 off
    keep_freed_memory()  # as p2pfl.run
    rows = []
    print(f"{args.algorithm}, {args.images} Fashion-MNIST images per peer, batch {args.batch_size}, one local "
          f"epoch per round, device {args.device}, {args.threads} thread(s)")
    print(f"{'model':>13} {'peers':>5} {'loop ep/s':>10} {'batched ep/s':>12} {'ratio':>6} "
          f"{'eval loop s':>11} {'eval batched s':>14} {'ratio':>6}")
    for model in args.models.split(","):
        for peers in (int(p) for p in args.peers.split(",")):
            with tempfile.TemporaryDirectory() as tmp:
                algos = {mode: build(mode, peers, model, args, Path(tmp) / mode) for mode in ("off", "on")}
                assert algos["on"].batched is not None and algos["off"].batched is None
                best = {mode: float("inf") for mode in algos}
                for algo in algos.values():
                    time_round(algo, 1, args.device)  # warm-up
                for t in range(2, 2 + args.repeats):
                    for mode, algo in algos.items():
                        best[mode] = min(best[mode], time_round(algo, t, args.device))
                evals = {}
                if not args.no_eval:
                    for mode, algo in algos.items():
                        start = time.perf_counter()
                        algo.score_peers(sorted(algo.peers), final=True)
                        sync(args.device)
                        evals[mode] = time.perf_counter() - start
            row = {"model": model, "peers": peers, "loop_peer_epochs_per_s": peers / best["off"],
                   "batched_peer_epochs_per_s": peers / best["on"], "train_ratio": best["off"] / best["on"],
                   "eval_loop_s": evals.get("off"), "eval_batched_s": evals.get("on"),
                   "eval_ratio": evals["off"] / evals["on"] if evals else None}
            rows.append(row)
            ev = (f"{row['eval_loop_s']:11.1f} {row['eval_batched_s']:14.1f} {row['eval_ratio']:5.2f}x"
                  if evals else "")
            print(f"{model:>13} {peers:5d} {row['loop_peer_epochs_per_s']:10.2f} "
                  f"{row['batched_peer_epochs_per_s']:12.2f} {row['train_ratio']:5.2f}x {ev}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
