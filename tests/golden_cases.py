"""Golden runs: a short run of every method with every option given explicitly, whose metrics.jsonl (timings
aside) must not change under refactoring. `python tests/golden_cases.py --record` rewrites tests/golden/."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parent / "golden"

#: Every option of a run at the value the golden files were recorded with (plumbing like out/name aside).
BASE: dict[str, Any] = {
    "topology": "cycle", "peers": 4, "rounds": 3, "seed": 3, "mixing": "metropolis", "p": 0.7,
    "graph_file": None, "participation": 1.0, "timeout": 60.0, "threads": 1, "device": "cpu",
    "cuda_aware_mpi": False, "chunk_mb": 1024, "eval_every": 2, "progress": False, "plots": False,
    "checkpoint_every": 0, "resume": None, "fault": None, "on_nonfinite": "rollback",
    "resample": False, "link_failure": 0.0, "crash": None,
    "churn": 0.0, "stragglers": 0.0, "straggler_work": 0.5, "rejoin": "mix", "vector_size": 1000,
    "vector_dtype": "float32", "byzantine": None, "attack": "sign-flip", "attack_scale": 1.0, "aggregator": "mean",
    "trim": 1, "clip_radius": None,
    "dataset": "synthetic", "data_dir": None, "download": False, "partition": "dirichlet", "alpha": 0.5,
    "beta": 0.5, "min_size": 10, "rotate_groups": 1, "train_subset": 256,
    "model": "simple-cnn", "local_epochs": 1.0, "local_steps": 2, "batch_size": 32, "optimizer": "adam",
    "lr": 1e-3, "momentum": 0.9, "weight_decay": 0.0, "schedule": "constant", "keep_optimizer": False,
    "batch_peers": "off", "fedbn": "off", "weight_by_data": False, "temperature": 0.5, "proj_dim": 32,
    "probe_epochs": 3, "eval_peers": None,
    "knn_k": 20, "mu": 0.0, "prev_models": 1, "muscle_m": 3, "contrastive_steps": 1, "public_size": 200,
    "public_batch": 16, "rep_dim": 32, "loss": "muscle", "align_tau": None, "muscle_tau_prev": None,
    "peers_spec": None, "lora_rank": 16,
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


def run_case(case: str, out: Path) -> list[dict[str, Any]]:
    """Run `case` in this process and return its normalised records."""
    from p2pfl.run import main

    args: list[str] = []
    for key, value in {**options(case), "out": str(out), "name": case}.items():
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
    GOLDEN.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for case in wanted:
            records = run_case(case, Path(tmp))
            (GOLDEN / f"{case}.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
            print(f"recorded {case}: {len(records)} records")
