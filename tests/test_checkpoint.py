"""Checkpoints: a run interrupted after round 2 and resumed gives the same numbers as one that never stopped,
also when the resumed job runs on another number of ranks."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_job

BASE = ["-m", "p2pfl.run", "--algorithm", "dec-ssl", "--dataset", "synthetic", "--peers", "4", "--local-steps",
        "2", "--batch-size", "32", "--probe-epochs", "2", "--knn-k", "20", "--no-progress", "--no-plots",
        "--checkpoint-every", "1", "--batch-peers", "off"]  # resumed on 2 ranks, compared bit for bit


def _numbers(run_dir: Path) -> list[dict]:
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        out.append({k: v for k, v in record.items() if not k.startswith("time_") and k not in ("elapsed_s",
                                                                                            "round_s")})
    return out


@pytest.mark.parametrize("resume_ranks", [0, pytest.param(2, marks=pytest.mark.mpi)])
def test_resume_equals_uninterrupted(runs_dir: Path, resume_ranks: int) -> None:
    full = run_job([*BASE, "--rounds", "3", "--out", str(runs_dir), "--name", "full"], ranks=0)
    assert full.returncode == 0, full.stderr[-2000:]
    part = run_job([*BASE, "--rounds", "2", "--out", str(runs_dir), "--name", "part"], ranks=0)
    assert part.returncode == 0, part.stderr[-2000:]
    resumed = run_job([*BASE, "--rounds", "3", "--resume", str(runs_dir / "part")], ranks=resume_ranks)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    full_records = [r for r in _numbers(runs_dir / "full") if r["type"] == "round"]
    resumed_records = [r for r in _numbers(runs_dir / "part") if r["type"] == "round"]
    assert [r["round"] for r in resumed_records] == [0, 1, 2, 3]
    assert resumed_records == full_records
    final_full = [r for r in _numbers(runs_dir / "full") if r["type"] == "eval"][-1]
    final_resumed = [r for r in _numbers(runs_dir / "part") if r["type"] == "eval"][-1]
    assert final_resumed == final_full
