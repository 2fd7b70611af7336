"""Golden runs: a short run of every method with every option given explicitly, whose metrics.jsonl (timings
aside) must not change under refactoring. `python tests/golden_cases.py --record` rewrites tests/golden/ and
the fingerprint of the machine and libraries it was recorded with (tests/golden/FINGERPRINT.json).

The runs compute in float64 (--dtype float64): two CPUs' kernels (instruction sets, BLAS builds) round
differently, and float32 SimCLR amplifies a last-bit difference to percents within a round, while in float64 the
runs stay within ~1e-9 of each other (RTOL's note). So a golden holds bit for bit where its fingerprint matches
and within RTOL elsewhere (`differences`), with every key, integer, string and flag still exact.
"""
from __future__ import annotations

import json
import math
import platform
import sys
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parent / "golden"
FINGERPRINT = GOLDEN / "FINGERPRINT.json"
#: Relative tolerance of every float where the fingerprint differs; ATOL for values recorded as (near) zero.
#: Measured here against the AVX-512 recording with torch's generic kernels (ATEN_CPU_CAPABILITY=default): losses
#: within 6e-12, the weight drifts (norms of differences of nearly equal models) within 1.0e-9. A learning rate
#: 1e-6 relative off the golden's moves the consensus distance by 2e-6 and the losses by up to 3e-8
#: (tests/test_golden.py asserts such a change is caught).
RTOL = 1e-7
ATOL = 1e-12

#: Every option of a run at the value the golden files were recorded with (plumbing like out/name aside).
BASE: dict[str, Any] = {
    "topology": "cycle", "peers": 4, "rounds": 3, "seed": 3, "mixing": "metropolis", "p": 0.7,
    "graph_file": None, "participation": 1.0, "timeout": 60.0, "threads": 1, "device": "cpu",
    "cuda_aware_mpi": False, "chunk_mb": 1024, "eval_every": 2, "progress": False, "plots": False, "log": None,
    "checkpoint_every": 0, "resume": None, "fault": None, "on_nonfinite": "rollback",
    "resample": False, "link_failure": 0.0, "crash": None,
    "churn": 0.0, "stragglers": 0.0, "straggler_work": 0.5, "rejoin": "mix", "vector_size": 1000,
    "vector_dtype": "float64", "byzantine": None, "attack": "sign-flip", "attack_scale": 1.0, "aggregator": "mean",
    "trim": 1, "clip_radius": None,
    "dataset": "synthetic", "data_dir": None, "download": False, "partition": "dirichlet", "alpha": 0.5,
    "beta": 0.5, "min_size": 10, "rotate_groups": 1, "train_subset": 256,
    "model": "simple-cnn", "local_epochs": 1.0, "local_steps": 2, "batch_size": 32, "optimizer": "adam",
    "lr": 1e-3, "momentum": 0.9, "weight_decay": 0.0, "schedule": "constant", "keep_optimizer": False,
    "batch_peers": "off", "fedbn": "off", "weight_by_data": False, "temperature": 0.5, "proj_dim": 32,
    "probe_epochs": 3, "eval_peers": None, "zeta2_batch": 0, "n_eff_gamma": 0.951,
    "knn_k": 20, "mu": 0.0, "prev_models": 1, "muscle_m": 3, "contrastive_steps": 1, "public_size": 200,
    "public_batch": 16, "rep_dim": 32, "loss": "muscle", "align_tau": None, "muscle_tau_prev": None,
    "peers_spec": None, "lora_rank": 16, "dtype": "float64",
}
SGD = {"optimizer": "sgd", "lr": 0.02, "momentum": 0.9, "weight_decay": 1e-5}

CASES: dict[str, dict[str, Any]] = {
    "consensus": {"algorithm": "consensus", "topology": "random", "participation": 0.5},
    "dec-ssl": {"algorithm": "dec-ssl", "schedule": "cosine"},
    "dec-ssl-fedbn-partial": {"algorithm": "dec-ssl", "fedbn": "type", "participation": 0.5,
                              "model": "resnet-small", "keep_optimizer": True},
    "dec-sl": {"algorithm": "dec-sl", "rotate_groups": 2},
    "local": {"algorithm": "local", "partition": "iid"},
    "fedavg": {"algorithm": "fedavg", **SGD, "weight_by_data": True, "topology": "complete",
               "mixing": "uniform"},
    "fedprox": {"algorithm": "fedprox", **SGD, "mu": 0.01},
    "scaffold": {"algorithm": "scaffold", **SGD, "momentum": 0.0},
    "moon": {"algorithm": "moon", **SGD, "mu": 5.0, "prev_models": 2, "participation": 0.75},
    "solo": {"algorithm": "solo", **SGD},
    "fedmuscle": {"algorithm": "fedmuscle", "topology": "complete", "muscle_m": 2, "contrastive_steps": 2},
    "fedmuscle-gram": {"algorithm": "fedmuscle", "loss": "gram", "keep_optimizer": True},
    "fedmuscle-hetero": {"algorithm": "fedmuscle", "topology": "complete", "loss": "pairwise",
                         "peers_spec": str(GOLDEN / "spec.yaml")},
    "local-spec": {"algorithm": "local", "peers_spec": str(GOLDEN / "spec.yaml")},
}


def options(case: str) -> dict[str, Any]:
    return {**BASE, **CASES[case]}


def normalise(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl without timing fields."""
    from p2pfl.records import TIMING_FIELDS

    out = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        out.append({k: v for k, v in record.items() if k not in TIMING_FIELDS})
    return out


def fingerprint() -> dict[str, str]:
    """What decides a run's last bits: the CPU (model and vector extensions), the kernels torch dispatches to,
    and the library versions."""
    import numpy
    import torch

    cpu, flags = platform.processor(), ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not cpu:
                cpu = value.strip()
            if key.strip() in ("flags", "Features") and not flags:
                flags = " ".join(sorted(f for f in value.split() if f.startswith(("avx", "amx", "fma", "sse", "sve",
                                                                                    "asimd"))))
    except OSError:
        pass
    return {"machine": platform.machine(), "cpu": cpu, "cpu_flags": flags,
            "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
            "numpy": numpy.__version__, "python": platform.python_version()}


def recorded_fingerprint() -> dict[str, str] | None:
    return json.loads(FINGERPRINT.read_text()) if FINGERPRINT.exists() else None


def differences(want: Any, have: Any, rtol: float = 0.0, atol: float = 0.0, where: str = "") -> list[str]:
    """Where `have` departs from `want`: keys, list lengths, types and every non-float exactly; floats
    exactly (rtol = atol = 0) or within rtol relative / atol absolute. One line per difference."""
    if isinstance(want, dict) and isinstance(have, dict):
        if set(want) != set(have):
            return [f"{where}: keys {sorted(set(want) ^ set(have))} differ"]
        return [d for k in sorted(want) for d in differences(want[k], have[k], rtol, atol, f"{where}.{k}")]
    if isinstance(want, list) and isinstance(have, list):
        if len(want) != len(have):
            return [f"{where}: {len(have)} items, recorded {len(want)}"]
        return [d for i, (a, b) in enumerate(zip(want, have)) for d in differences(a, b, rtol, atol, f"{where}[{i}]")]
    if type(want) is not type(have):
        return [f"{where}: {have!r} ({type(have).__name__}), recorded {want!r} ({type(want).__name__})"]
    if isinstance(want, float):
        if want == have or (math.isnan(want) and math.isnan(have)):
            return []
        if rtol or atol:
            if math.isfinite(want) and math.isfinite(have) and math.isclose(want, have, rel_tol=rtol, abs_tol=atol):
                return []
        return [f"{where}: {have!r}, recorded {want!r} (relative {abs(have - want) / max(abs(want), 1e-300):.2e})"]
    return [] if want == have else [f"{where}: {have!r}, recorded {want!r}"]


def run_case(case: str, out: Path, **changes: Any) -> list[dict[str, Any]]:
    """Run `case` (with `changes` to its options) in this process and return its normalised records."""
    from p2pfl.run import main

    args: list[str] = []
    for key, value in {**options(case), **changes, "out": str(out), "name": case}.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            args.append(flag if value else "--no-" + key.replace("_", "-"))
        else:
            args += [flag, "none" if value is None else str(value)]
    assert main(args) == 0
    return normalise(out / case / "metrics.jsonl")


if __name__ == "__main__":
    import tempfile

    sys.path.insert(0, str(GOLDEN.parent.parent))
    if "--record" not in sys.argv:
        sys.exit("usage: python tests/golden_cases.py --record [CASE ...]")
    wanted = [a for a in sys.argv[1:] if not a.startswith("--")] or list(CASES)
    if set(wanted) != set(CASES) and recorded_fingerprint() not in (None, fingerprint()):
        sys.exit("the goldens were recorded on another machine or library versions: record every case here")
    GOLDEN.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for case in wanted:
            records = run_case(case, Path(tmp))
            (GOLDEN / f"{case}.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
            print(f"recorded {case}: {len(records)} records")
    FINGERPRINT.write_text(json.dumps(fingerprint(), indent=1, sort_keys=True) + "\n")
