"""The run command end to end with --algorithm consensus: files, determinism across layouts, the spectral rate."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import topologies
from topologies import mixing_of

from conftest import run_job


def _rounds(run_dir: Path) -> list[dict]:
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in lines if r["type"] == "round"]


def _consensus_job(runs_dir: Path, name: str, ranks: int, *extra: str) -> Path:
    args = ["-m", "p2pfl.run", "--algorithm", "consensus", "--peers", "8", "--rounds", "12",
            "--vector-size", "20000", "--out", str(runs_dir), "--name", name, "--no-progress", "--no-plots", *extra]
    proc = run_job(args, ranks=ranks)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return runs_dir / name


@pytest.mark.mpi
def test_same_seed_same_metrics_on_1_2_4_ranks(runs_dir: Path) -> None:
    runs = {r: _rounds(_consensus_job(runs_dir, f"r{r}", r, "--topology", "random", "--p", "0.4"))
            for r in (0, 2, 4)}
    values = {r: [rec["consensus_distance"] for rec in recs] for r, recs in runs.items()}
    assert len(values[0]) == 13
    assert values[0] == values[2] == values[4]  # bitwise, not approximately


def test_run_folder_contents(runs_dir: Path) -> None:
    run_dir = _consensus_job(runs_dir, "files", 0, "--topology", "star")
    for name in ("config.yaml", "manifest.json", "metrics.jsonl", "summary.json"):
        assert (run_dir / name).is_file(), name
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["topology"]["edges"] == [[0, j] for j in range(1, 8)]
    assert np.allclose(mixing_of(manifest["topology"]).sum(axis=1), 1.0)
    assert manifest["hosts"][0]["peers"] == list(range(8))
    assert {"torch", "numpy", "mpi4py", "networkx"} <= set(manifest["versions"])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["rounds"] == 12 and summary["peers"] == 8


@pytest.mark.parametrize("topology,mixing", [("cycle", "metropolis"), ("binary-tree", "metropolis"),
                                             ("star", "max-degree")])
def test_consensus_distance_tracks_lambda2(runs_dir: Path, topology: str, mixing: str) -> None:
    """cd_t <= |λ2|^(2t) cd_0 for symmetric W, and the late per-round ratio approaches |λ2|^2."""
    run_dir = _consensus_job(runs_dir, f"{topology}-{mixing}", 0, "--topology", topology, "--mixing", mixing,
                             "--rounds", "40")
    W = topologies.mixing_matrix(topologies.build(topology, 8), mixing)
    lam = float(np.sort(np.abs(np.linalg.eigvals(W)))[-2])
    cd = np.array([r["consensus_distance"] for r in _rounds(run_dir)])
    t = np.arange(len(cd))
    assert np.all(cd <= cd[0] * lam ** (2 * t) * (1 + 1e-6))
    late_rate = (cd[-1] / cd[-11]) ** (1 / 10)
    assert late_rate == pytest.approx(lam ** 2, rel=0.05)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["final"]["mean_shift"] < 1e-5  # metropolis and max-degree are doubly stochastic


def test_uniform_weights_bias_the_average_on_a_star(runs_dir: Path) -> None:
    """Row-stochastic weights converge to the consensus-share-weighted average, not the plain one."""
    run_dir = _consensus_job(runs_dir, "star-uniform", 0, "--topology", "star", "--mixing", "uniform",
                             "--rounds", "30")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["final"]["mean_shift"] > 0.1
