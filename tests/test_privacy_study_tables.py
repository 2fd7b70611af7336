"""analysis.privacy_study and analysis.reconstruction_study read a study folder into their tables: each group's
mean and interval over seeds (min–max at 2, t from 3), ε from each mechanism's own record, and the round each
seed first reached its final count (against values computed here by hand)."""
from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path

import pytest
from scipy import stats

from analysis import privacy_study, reconstruction_study


def _study(root: Path, points: list[tuple[dict, dict, dict, list[dict]]]) -> Path:
    plan = {"points": []}
    for i, (axes, options, summary, records) in enumerate(points):
        name = f"p{i}"
        plan["points"].append({"name": name, "axes": axes, "options": options})
        run = root / "runs" / name
        run.mkdir(parents=True)
        (run / "summary.json").write_text(json.dumps(summary))
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        (run / "manifest.json").write_text(json.dumps({"curious": {"peers": [0]}}))
    (root / "plan.json").write_text(json.dumps(plan))
    return root


def _final(acc: float, auc: float) -> dict:
    return {"test_acc_avg": acc, "test_acc_peer_mean": acc - 0.1, "curious_mia_auc_peer_mean": auc}


def test_privacy_table_means_intervals_and_each_mechanisms_epsilon(tmp_path: Path) -> None:
    dp = {"topology": "ring", "mechanism": "dp"}
    muff = {"topology": "ring", "mechanism": "muffliato"}
    rounds = [{"type": "round", "round": 1, "dp_epsilon": {"0": 0.5, "1": 0.7}},
              {"type": "round", "round": 2, "dp_epsilon": {"0": 1.5, "1": 1.9}}]
    study = _study(tmp_path, [(dp, {}, {"final": _final(0.2, 0.5)}, rounds),
                              (dp, {}, {"final": _final(0.4, 0.6)}, rounds),
                              (muff, {}, {"final": _final(0.3, 0.5), "muffliato_eps_mean": 2.5}, [])])
    table = {r["mechanism"]: r for r in privacy_study.rows(study)}
    # 2 seeds: the min–max of the two, never a t-interval (±12.7 standard errors: 0.3 ± 1.27 here)
    dp_row = table["dp"]
    assert math.isclose(dp_row["test_acc_avg"], 0.3) and (dp_row["test_acc_avg_low"], dp_row["test_acc_avg_high"]) \
        == (0.2, 0.4) and dp_row["test_acc_avg_interval"] == "min–max"
    assert (dp_row["test_acc_peer_mean_low"], dp_row["test_acc_peer_mean_high"]) == pytest.approx((0.1, 0.3))
    assert dp_row["epsilon"] == 1.9  # the last round's largest peer
    assert table["muffliato"]["epsilon"] == 2.5 and math.isnan(table["muffliato"]["test_acc_avg_low"])
    assert table["muffliato"]["test_acc_avg_interval"] == "none"
    three = _study(tmp_path / "three", [(dp, {}, {"final": _final(acc, 0.5)}, rounds) for acc in (0.2, 0.4, 0.99)])
    (row,) = privacy_study.rows(three)
    half = stats.t.ppf(0.975, 2) * statistics.stdev([0.2, 0.4, 0.99]) / math.sqrt(3)
    mean = (0.2 + 0.4 + 0.99) / 3  # 3 seeds: the t 95% interval, cut to accuracy's [0, 1]
    assert row["test_acc_avg_interval"] == "t 95% CI" and mean + half > 1.0 and mean - half < 0.0
    assert (row["test_acc_avg_low"], row["test_acc_avg_high"]) == (0.0, 1.0)
    close = [(dp, {}, {"final": _final(acc, 0.5)}, rounds) for acc in (0.5, 0.52, 0.6)]
    three = _study(tmp_path / "three-close", close)
    (row,) = privacy_study.rows(three)
    half = stats.t.ppf(0.975, 2) * statistics.stdev([0.5, 0.52, 0.6]) / math.sqrt(3)
    assert (row["test_acc_avg_low"], row["test_acc_avg_high"]) == pytest.approx((0.54 - half, 0.54 + half))
    assert table["dp"]["seeds"] == 2


def test_reconstruction_table_counts_and_first_round_of_the_final_count(tmp_path: Path) -> None:
    axes = {"size": "n5", "curious": "one", "curious_placement": "degree"}

    def evals(counts: list[int]) -> list[dict]:
        return [{"type": "eval", "round": t + 1, "curious_reconstructed": c, "curious_reconstructed_non_neighbours": 1}
                for t, c in enumerate(counts)]

    study = _study(tmp_path, [(axes, {"peers": 5}, {}, evals([1, 2, 4, 4, 4])),
                              (axes, {"peers": 5}, {}, evals([1, 1, 1, 3, 4]))])
    (row,) = reconstruction_study.rows(reconstruction_study.curves(study))
    assert row["reconstructed_after_1"] == 1 and row["reconstructed_after_3"] == 2.5
    assert row["rounds_to_final"] == "3 5" and row["reconstructed_final"] == "4 4" and row["curious_peers"] == 1


def test_the_reconstruction_command_writes_its_table_and_figure_and_refuses_an_empty_study(tmp_path: Path) -> None:
    axes = {"size": "n5", "curious": "one", "curious_placement": "degree"}
    records = [{"type": "eval", "round": t + 1, "curious_reconstructed": c, "curious_reconstructed_non_neighbours": 0}
               for t, c in enumerate([1, 4])]
    study = _study(tmp_path / "study", [(axes, {"peers": 5}, {}, records)])
    out = tmp_path / "out" / "table"
    assert reconstruction_study.main([str(study), "--out", str(out)]) == 0
    with open(out.with_suffix(".csv"), newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    expected = reconstruction_study.rows(reconstruction_study.curves(study))[0]
    assert row == {k: str(v) for k, v in expected.items()}
    assert out.with_suffix(".png").stat().st_size > 0
    (tmp_path / "empty").mkdir()
    empty = _study(tmp_path / "empty", [])
    assert reconstruction_study.main([str(empty), "--out", str(tmp_path / "none")]) == 1
    assert privacy_study.main([str(empty), "--out", str(tmp_path / "none")]) == 1
    assert not (tmp_path / "none.csv").exists()
