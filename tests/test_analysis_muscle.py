"""analysis.muscle: FedMuscle's Δ% against local training over a study, paired by seed, checked on a study
folder written by hand against the numbers computed here."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.muscle import build_report, main, paired_deltas
from analysis.study import load_study

#: peer task metrics (accuracy) of (method, seed); pairwise seed 2 never finished
ACC = {("muscle", 1): [0.60, 0.50], ("muscle", 2): [0.66, 0.40], ("pairwise", 1): [0.55, 0.50],
       ("local", 1): [0.50, 0.50], ("local", 2): [0.60, 0.50]}
COS = {"muscle": [0.99, 0.90]}  # per round, the same for every peer


@pytest.fixture
def study(tmp_path: Path) -> Path:
    entries = []
    (tmp_path / "logs").mkdir()
    for method in ("muscle", "pairwise", "local"):
        for seed in (1, 2):
            name = f"method-{method}__topology-complete__seed-{seed}"
            entries.append({"name": name, "axes": {"method": method, "topology": "complete", "seed": str(seed)},
                            "options": {}})
            if (method, seed) not in ACC:
                continue
            run = tmp_path / "runs" / name
            run.mkdir(parents=True)
            (run / "config.yaml").write_text(f"algorithm: {'local' if method == 'local' else 'fedmuscle'}\n")
            lines = []
            for r, cos in enumerate(COS.get(method, [None, None]), start=1):
                record = {"type": "round", "round": r, "muscle_m": {"0": 1.0, "1": 1.0}}
                if cos is not None:
                    record["grad_cos_pairwise"] = {"0": cos, "1": cos}
                lines.append(record)
            per_peer = {str(p): {"task_metric": a, "task_metric_name": "accuracy"}
                        for p, a in enumerate(ACC[method, seed])}
            lines.append({"type": "eval", "round": 2, "final": True, "metrics": {}, "per_peer": per_peer})
            (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
            comm = {"bytes_sent_per_peer_round": 2048, "server_downlink_bytes_per_peer_round": 2 ** 21,
                    "server_uplink_bytes_per_peer_round": 1024, "server_M": 1}
            (run / "summary.json").write_text(json.dumps({"final": {}, "communication": comm}))
            (tmp_path / "logs" / f"{name}.rc").write_text("0\n")
    (tmp_path / "plan.json").write_text(json.dumps({"name": "m", "axes": ["method", "topology", "seed"],
                                                    "points": entries}))
    return tmp_path


def test_deltas_pair_each_run_with_its_local_twin(study: Path) -> None:
    deltas = {(d.method, d.seed): d for d in paired_deltas(load_study(study))}
    assert set(deltas) == {("muscle", "1"), ("muscle", "2"), ("pairwise", "1")}
    m1 = deltas["muscle", "1"]
    assert m1.per_peer == pytest.approx({"0": 20.0, "1": 0.0}) and m1.mean == pytest.approx(10.0)
    assert deltas["muscle", "2"].per_peer == pytest.approx({"0": 10.0, "1": -20.0})
    assert deltas["pairwise", "1"].mean == pytest.approx(5.0)


def test_report_reads_the_differences_the_cosines_and_the_bytes(study: Path) -> None:
    text = build_report(load_study(study))
    # seeds' means +10 and −5: at n = 2 the min–max, never a t-interval (±12.7 standard errors)
    assert "| muscle | complete | +2.50 [-5.00, +10.00] (min–max, n=2) | -10.0 … +15.0 | 0:+15.0 1:-10.0 |" in text
    assert "| muscle − pairwise | complete | +5.00 (n=1) | 1/1 |" in text  # seed 2 has no pairwise run
    assert "±" not in text
    assert "| muscle | complete | 0.990 | 0.900 |" in text
    assert "| pairwise | complete | 2.0 KiB | 2.0 MiB | 1.0 KiB | 1 |" in text
    assert main([str(study)]) == 0
    rows = (study / "muscle.csv").read_text().splitlines()
    assert rows[0] == "method,topology,seed,mean_delta_pct,delta_pct_peer0,delta_pct_peer1" and len(rows) == 4
