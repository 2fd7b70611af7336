"""Linear probes of a rank's peers: the plain one-model probe peer after peer next to the batched fit.

    python benchmarks/bench_probes.py [--peers 16] [--samples 60000] [--dim 84] [--epochs 2] [--threads 1]

Features are random (ReLU of Gaussians, stored sample-major as the runs make them), labels uniform over 10
classes; both paths fit the same probes (one stream, the same draws) and the table gives the seconds of each,
their ratio and the largest difference of the accuracies (the batched fit equals the one-by-one fit to float
rounding, tests/test_batched_probe.py).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from p2pfl.evaluation import linear_probe, linear_probes  # noqa: E402
from p2pfl.runtime.allocator import keep_freed_memory  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--peers", type=int, default=16)
    parser.add_argument("--samples", type=int, default=60000)
    parser.add_argument("--test", type=int, default=10000)
    parser.add_argument("--dim", type=int, default=84)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as p2pfl.run
    g = torch.Generator().manual_seed(0)
    p, n, m, d, c = args.peers, args.samples, args.test, args.dim, args.classes
    train_f = torch.randn(n, p, d, generator=g).relu_().transpose(0, 1)
    test_f = torch.randn(m, p, d, generator=g).relu_().transpose(0, 1)
    train_y, test_y = torch.randint(0, c, (n,), generator=g), torch.randint(0, c, (m,), generator=g)
    start = time.perf_counter()
    one = [linear_probe(train_f[i].contiguous(), train_y, test_f[i].contiguous(), test_y, c, args.epochs,
                        torch.Generator().manual_seed(1)) for i in range(p)]
    loop_s = time.perf_counter() - start
    start = time.perf_counter()
    batched = linear_probes(train_f, train_y, test_f, test_y, c, args.epochs, torch.Generator().manual_seed(1))
    batched_s = time.perf_counter() - start
    diff = max(abs(a - b) for a, b in zip(one, batched))
    print(f"{p} peers, {n} x {d} features, {args.epochs} epochs, {args.threads} thread(s): one by one "
          f"{loop_s:.1f} s, batched {batched_s:.1f} s ({loop_s / batched_s:.1f}x); "
          f"largest accuracy difference {diff:.4f}")


if __name__ == "__main__":
    main()
