"""The simulated clock's own cost against the work it simulates, at 16 and 1,000 peers, in one run.

    python benchmarks/bench_simtime.py                       # K = 16 and 1000, 20 events a peer
    python benchmarks/bench_simtime.py --peers 16 100 1000 --events-per-peer 50

For each K, on a random 4-regular graph with a log-normal spread of step times, latency and finite bandwidths
(the model of launch/studies/simtime-cifar10-cpu.yaml), one torch thread:
  (a) async: p2pfl.network.events.schedule (the event order) and batches (disjoint pairs), per event, and
      p2pfl.async_gossip.matching (each batch's round network, dense K × K like every RoundNetwork), per event;
  (b) sync: NetworkModel.round_time of a round where every peer sends its model to its 4 neighbours, per round;
against the work an event or a round stands for: one local step of the simple CNN on a batch of 32 CIFAR-sized
images (forward, backward, SGD step; the median of --repeats), times 1 for an event and K for a round. The
ratios say how much of a run the simulator itself adds (below 1%: negligible).
  (c) end to end, `python -m p2pfl.run` in one process: fedavg on the synthetic data at K = 16 (one local step
      at batch 16) for --rounds synchronous rounds and for --rounds × K asynchronous updates, the same local
      steps; and consensus (100 floats, no local work) at K = 1000, 3 rounds against 3,000 updates. Reported: the
      runner's wall seconds (the records' round_s summed) per local step or per event, and async's ratio to sync.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import networkx as nx
import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from p2pfl.async_gossip import matching  # noqa: E402
from p2pfl.models import build_encoder  # noqa: E402
from p2pfl.network.events import batches, schedule  # noqa: E402
from p2pfl.network.timing import NetworkModel, bandwidths, compute_times, latencies  # noqa: E402
from p2pfl.runtime.files import loads  # noqa: E402

SIZE = 370_504  # bytes of the simple CNN's float32 parameters


def network(k: int, seed: int = 0) -> tuple[NetworkModel, nx.Graph]:
    graph = nx.random_regular_graph(4, k, seed=seed)
    return NetworkModel(compute_times(k, seed, 0.1, 0.5), latencies(k, 0.02), bandwidths(k, 5e6),
                        bandwidths(k, 5e6)), graph


def local_step_s(repeats: int) -> float:
    """Median seconds of one SGD step of the simple CNN on 32 random 3 × 32 × 32 images."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(build_encoder("simple-cnn", 3, 32), torch.nn.LazyLinear(10))
    x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
    model(x)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def per_event(k: int, events_per_peer: int) -> tuple[float, float, int]:
    """Seconds per event of the order and its batching, and of building the batches' round networks."""
    model, graph = network(k)
    steps = dict.fromkeys(range(k), 1.0)
    start = time.perf_counter()
    events = schedule(model, graph, 0, steps, SIZE, updates=events_per_peer * k)
    done = batches(events)
    order = (time.perf_counter() - start) / len(events)
    start = time.perf_counter()
    for t, batch in enumerate(done[:200], start=1):
        matching(t, batch, k)
    nets = (time.perf_counter() - start) / sum(len(b) for b in done[:200])
    return order, nets, len(events) // len(done)


def per_round(k: int, repeats: int) -> float:
    model, graph = network(k)
    sizes = {(i, j): SIZE for i, j in graph.edges} | {(j, i): SIZE for i, j in graph.edges}
    steps = dict.fromkeys(range(k), 1.0)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        model.round_time(steps, sizes)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def runner_seconds(args: list[str], out: Path, name: str) -> tuple[float, int]:
    """The summed round_s of a run and its number of rounds (records after round 0)."""
    cmd = [sys.executable, "-m", "p2pfl.run", *args, "--out", str(out), "--name", name, "--no-progress",
           "--no-plots", "--eval-every", "0", "--threads", "1"]
    subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True)
    rounds = [loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()]
    rounds = [r for r in rounds if r["type"] == "round" and r["round"] > 0]
    return sum(r["round_s"] for r in rounds), len(rounds)


def end_to_end(rounds: int) -> None:
    clock = ["--compute-time", "0.1", "--compute-spread", "0.5", "--latency", "0.02", "--upload-rate", "5e6",
             "--download-rate", "5e6", "--topology", "random", "--p", "0.3", "--seed", "1"]
    learn = ["--algorithm", "fedavg", "--dataset", "synthetic", "--peers", "16", "--local-steps", "1",
             "--batch-size", "16", "--optimizer", "sgd", "--lr", "0.05", *clock]
    agree = ["--algorithm", "consensus", "--vector-size", "100", "--peers", "1000", *clock]
    print("\n| run | sync: runner s per step | async: runner s per event | async / sync | async batches |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for label, base, k, n in (("fedavg K=16", learn, 16, rounds), ("consensus K=1000", agree, 1000, 3)):
            sync, _ = runner_seconds([*base, "--rounds", str(n)], Path(tmp), f"{k}-sync")
            asyn, batches_run = runner_seconds([*base, "--mode", "async", "--updates", str(n * k)], Path(tmp),
                                               f"{k}-async")
            per_sync, per_async = sync / (n * k), asyn / (n * k)
            print(f"| {label} | {per_sync * 1e3:.2f} ms | {per_async * 1e3:.2f} ms | {per_async / per_sync:.2f}× "
                  f"| {batches_run} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers", type=int, nargs="+", default=[16, 1000])
    parser.add_argument("--events-per-peer", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=30, help="(c): synchronous rounds of the fedavg runs")
    parser.add_argument("--no-runs", action="store_true", help="skip (c)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    np.random.seed(0)
    step = local_step_s(args.repeats)
    print(f"one local step (simple CNN, batch 32, 1 thread): {step * 1e3:.2f} ms")
    print("| K | order + batches per event | round networks per event | events per batch | event overhead / step "
          "| sync round_time per round | round overhead / (K steps) |")
    print("|---|---|---|---|---|---|---|")
    for k in args.peers:
        order, nets, per_batch = per_event(k, args.events_per_peer)
        rnd = per_round(k, max(3, args.repeats // 4))
        print(f"| {k} | {order * 1e6:.1f} µs | {nets * 1e6:.1f} µs | {per_batch} | {(order + nets) / step:.2%} "
              f"| {rnd * 1e3:.2f} ms | {rnd / (k * step):.3%} |")
    if not args.no_runs:
        end_to_end(args.rounds)


if __name__ == "__main__":
    main()
