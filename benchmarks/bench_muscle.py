"""Time and memory of the exact Muscle loss (tensor contraction) against the enumeration it replaces.

    python benchmarks/bench_muscle.py [--device cpu|cuda] [--repeats 5] [--json PATH]

For B = 32 with M = 1..5, B = 64 with M = 4 and B = 128 with M = 3 (d = 256), it measures forward + backward
of ``muscle_loss`` and of ``muscle_loss_naive`` (all B^(M+1) scores materialised, then a log-sum-exp). The naive
loss is skipped when its score tensor alone would exceed 2 GiB. Every measurement runs in a fresh subprocess,
so peak memory is per case: on CPU the rise of the process's peak resident set (ru_maxrss) over its resident
set just before the first call -- an upper-bound estimate that includes allocator slack and thread-pool
buffers --; on CUDA torch.cuda.max_memory_allocated above the memory held before the first call.

Targets (SPEC §6 "Cost"): at B = 32, M = 4 the exact loss is at least 10x faster than the enumeration; at
B = 32, M = 5 it fits within 1 GiB.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CASES = [(32, 1), (32, 2), (32, 3), (32, 4), (32, 5), (64, 4), (128, 3)]
DIM = 256
NAIVE_LIMIT_BYTES = 2 * 1024**3
SPEEDUP_CASE, SPEEDUP_TARGET = (32, 4), 10.0
MEMORY_CASE, MEMORY_TARGET_MIB = (32, 5), 1024.0


def _rss_bytes() -> int:
    """Current resident set of this process (Linux /proc)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def worker(method: str, b: int, m: int, d: int, repeats: int, device: str) -> dict:
    """One measurement in this (fresh) process: median wall time of forward + backward, and peak memory."""
    import torch

    from p2pfl.losses import muscle_loss, muscle_loss_naive
    from p2pfl.seeding import SHARED, torch_generator

    fn = muscle_loss if method == "exact" else muscle_loss_naive
    gen = torch_generator(0, SHARED, f"bench_muscle/{b}/{m}", "cpu")
    anchor0 = torch.randn(b, d, generator=gen).to(device)
    others = torch.randn(m, b, d, generator=gen).to(device)
    cuda = device.startswith("cuda")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = _rss_bytes()
    times, value = [], None
    for k in range(repeats + 1):  # the first call warms up and is not timed
        anchor = anchor0.clone().requires_grad_(True)
        sync()
        t0 = time.perf_counter()
        loss = fn(anchor, others)
        loss.backward()
        sync()
        if k:
            times.append(time.perf_counter() - t0)
        value = float(loss.detach())
        del loss, anchor
    if cuda:
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    return {"median_s": statistics.median(times), "min_s": min(times), "repeats": repeats,
            "peak_mib": peak / 2**20, "loss": value}


def run_case(method: str, b: int, m: int, repeats: int, device: str) -> dict:
    cmd = [sys.executable, __file__, "--worker", method, str(b), str(m), str(DIM), str(repeats), device]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--naive-repeats", type=int, default=3)
    parser.add_argument("--json")
    parser.add_argument("--worker", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        method, b, m, d, repeats, device = args.worker
        print(json.dumps(worker(method, int(b), int(m), int(d), int(repeats), device)))
        return

    import torch

    mem_label = "peak CUDA alloc" if args.device.startswith("cuda") else "peak RSS rise"
    load0 = os.getloadavg()
    print(f"Muscle loss, forward + backward, d = {DIM}, device {args.device}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} CPU threads, {os.cpu_count()} CPUs, load average {load0[0]:.1f}; "
          f"memory = {mem_label} (MiB); times: median of repeats, speed-up on medians (on minima)")
    header = (f"{'B':>4} {'M':>2} {'tuples B^M':>12} | {'exact s':>9} {'exact MiB':>10} | {'naive s':>9} "
              f"{'naive MiB':>10} | {'speed-up':>17} {'rel diff':>9}")
    print(header)
    print("-" * len(header))
    rows = []
    for b, m in CASES:
        exact = run_case("exact", b, m, args.repeats, args.device)
        score_bytes = 4 * b ** (m + 1)
        if score_bytes > NAIVE_LIMIT_BYTES:
            naive = {"skipped": f"B^(M+1) = {b ** (m + 1):.3g} scores need {score_bytes / 2**30:.1f} GiB > 2 GiB"}
        else:
            naive = run_case("naive", b, m, args.naive_repeats, args.device)
        row = {"B": b, "M": m, "d": DIM, "exact": exact, "naive": naive}
        if "median_s" in exact and "median_s" in naive:
            row["speedup"] = naive["median_s"] / exact["median_s"]
            row["speedup_min"] = naive["min_s"] / exact["min_s"]
            row["rel_diff"] = abs(exact["loss"] - naive["loss"]) / max(abs(naive["loss"]), 1e-12)
        rows.append(row)

        def cell(res: dict, key: str, fmt: str) -> str:
            if "skipped" in res:
                return "skipped"
            if "error" in res:
                return "error"
            return format(res[key], fmt)

        def speedup_cell(row: dict) -> str:
            if "speedup" not in row:
                return "-"
            return f"{row['speedup']:.1f}x ({row['speedup_min']:.1f}x)"

        print(f"{b:>4} {m:>2} {b ** m:>12,} | {cell(exact, 'median_s', '9.4f'):>9} "
              f"{cell(exact, 'peak_mib', '10.1f'):>10} | "
              f"{cell(naive, 'median_s', '9.4f'):>9} {cell(naive, 'peak_mib', '10.1f'):>10} | "
              f"{speedup_cell(row):>17} "
              f"{format(row['rel_diff'], '9.1e') if 'rel_diff' in row else '-':>9}", flush=True)
    for row in rows:
        for key in ("exact", "naive"):
            note = row[key].get("skipped") or row[key].get("error")
            if note:
                print(f"  B={row['B']} M={row['M']} {key}: {note}")

    by_case = {(r["B"], r["M"]): r for r in rows}
    speed = by_case[SPEEDUP_CASE].get("speedup")
    mem = by_case[MEMORY_CASE]["exact"].get("peak_mib")
    targets = {
        "speedup_B32_M4": {"value": speed, "target": f">= {SPEEDUP_TARGET:g}x",
                           "met": speed is not None and speed >= SPEEDUP_TARGET},
        "memory_B32_M5_mib": {"value": mem, "target": f"<= {MEMORY_TARGET_MIB:g} MiB",
                              "met": mem is not None and mem <= MEMORY_TARGET_MIB},
    }
    print(f"target: B=32 M=4 exact vs naive speed-up {speed:.1f}x (>= {SPEEDUP_TARGET:g}x): "
          f"{'met' if targets['speedup_B32_M4']['met'] else 'NOT met'}" if speed is not None else
          "target: B=32 M=4 speed-up: not measured")
    print(f"target: B=32 M=5 exact peak memory {mem:.0f} MiB (<= {MEMORY_TARGET_MIB:g} MiB): "
          f"{'met' if targets['memory_B32_M5_mib']['met'] else 'NOT met'}" if mem is not None else
          "target: B=32 M=5 memory: not measured")
    load1 = os.getloadavg()
    print(f"load average at the end {load1[0]:.1f} (timings on a shared machine are noisy; rerun when idle)")
    if args.json:
        out = {"load_average": [load0[0], load1[0]], "benchmark": "muscle_loss", "device": args.device,
               "torch": torch.__version__,
               "threads": torch.get_num_threads(), "machine": platform.machine(), "cpus": os.cpu_count(),
               "memory_measure": mem_label, "cases": rows, "targets": targets}
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(out, indent=2))
        os.replace(tmp, path)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
