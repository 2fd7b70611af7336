"""Memory per peer of a FedAvg job after set-up and one local round: the resident set (after malloc_trim) less the
interpreter's, divided by K, beside the manifest's standing bytes per peer (docs/performance.md, "Shards as views").

    python benchmarks/bench_shard_memory.py --peers 100,1000 [--images 50000]

Each K runs in a process of its own (one rank, batched peers, simple-cnn, IID, one step of 32) on a CIFAR-sized
synthetic set saved as an npz: file in a temporary folder (the data set is generated, nothing is downloaded).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import ctypes, gc, json, os, sys
import torch
torch.set_num_threads(1)
from p2pfl.comm.world import World
from p2pfl.config import make_config, resolve
from p2pfl.run import build_algorithm, build_context

def rss():
    gc.collect(); ctypes.CDLL("libc.so.6").malloc_trim(0)
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

npz, k, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
cfg = make_config(algorithm="fedavg", peers=k, rounds=1, local_steps=1, batch_size=32, model="simple-cnn",
                  dataset="npz:" + npz, topology="cycle", partition="iid", eval_every=0, plots=False,
                  progress=False, threads=1, out=out)
world = World.detect()
before = rss()
ctx = build_context(world, resolve(cfg, world.size), announce=False)
algo = build_algorithm(ctx)
algo.local_updates(sorted(algo.peers), 1, ctx.schedule.at(1))
after = rss()
memory = ctx.manifest_extra.get("memory") or {}
print(json.dumps({"peers": k, "resident_per_peer_MiB": (after - before) / 2**20 / k, "memory": memory}))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", default="100,1000", help="comma-separated K")
    ap.add_argument("--images", type=int, default=50000, help="training images of the generated set")
    args = ap.parse_args(argv)
    import numpy as np

    from p2pfl.data.datasets.synthetic import synthetic_arrays

    with tempfile.TemporaryDirectory() as tmp:
        npz = Path(tmp) / "cifarlike.npz"
        arrays = synthetic_arrays(num_train=args.images, num_test=2000)
        np.savez(npz, x_train=arrays.x_train, y_train=arrays.y_train, x_test=arrays.x_test, y_test=arrays.y_test)
        print(f"{'K':>6} {'resident/peer MiB':>18} {'standing/peer MiB':>18}  shards")
        for k in (int(v) for v in args.peers.split(",")):
            res = subprocess.run([sys.executable, "-c", CHILD, str(npz), str(k), str(Path(tmp) / f"runs-{k}")],
                                 capture_output=True, text=True, cwd=ROOT, env=None)
            if res.returncode != 0:
                print(res.stderr.strip().splitlines()[-1] if res.stderr.strip() else f"K={k}: exit {res.returncode}")
                return 1
            row = json.loads(res.stdout.strip().splitlines()[-1])
            mem = row["memory"]
            standing = sum(mem.get(key, 0) for key in
                           ("parameters_bytes_per_peer", "optimizer_bytes_per_peer", "shard_bytes_mean")) / 2**20
            print(f"{k:>6} {row['resident_per_peer_MiB']:>18.2f} {standing:>18.2f}  {mem.get('shards', '?')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
