"""analysis.shift: a metric along one axis of a study and its drops from a reference label, paired by seed,
checked on a study folder written by hand against the same numbers computed here."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from analysis.shift import contrast, main, shift_table, shifts
from analysis.study import load_study, t_quantile

AXES = ["algorithm", "data", "seed"]
#: probe accuracy of (algorithm, data, seed); dec-sl's dir0.01 seed 3 never finished
VALUES = {("dec-ssl", "iid", 1): 0.80, ("dec-ssl", "iid", 2): 0.82, ("dec-ssl", "iid", 3): 0.81,
          ("dec-ssl", "dir0.01", 1): 0.79, ("dec-ssl", "dir0.01", 2): 0.80, ("dec-ssl", "dir0.01", 3): 0.81,
          ("dec-sl", "iid", 1): 0.88, ("dec-sl", "iid", 2): 0.86, ("dec-sl", "iid", 3): 0.87,
          ("dec-sl", "dir0.01", 1): 0.70, ("dec-sl", "dir0.01", 2): 0.74}


@pytest.fixture
def study(tmp_path: Path) -> Path:
    entries = []
    (tmp_path / "logs").mkdir()
    for algorithm in ("dec-ssl", "dec-sl"):
        for data in ("iid", "dir0.01"):
            for seed in (1, 2, 3):
                name = f"algorithm-{algorithm}__data-{data}__seed-{seed}"
                entries.append({"name": name, "axes": {"algorithm": algorithm, "data": data, "seed": str(seed)},
                                "options": {}})
                if (algorithm, data, seed) not in VALUES:
                    continue
                run = tmp_path / "runs" / name
                run.mkdir(parents=True)
                (run / "config.yaml").write_text(f"algorithm: {algorithm}\nseed: {seed}\n")
                metrics = {"probe_acc_avg": VALUES[algorithm, data, seed]}
                (run / "metrics.jsonl").write_text(json.dumps(
                    {"type": "eval", "round": 6, "final": True, "metrics": metrics, "per_peer": {}}) + "\n")
                (run / "summary.json").write_text(json.dumps({"final": metrics}))
                (tmp_path / "logs" / f"{name}.rc").write_text("0\n")
    (tmp_path / "plan.json").write_text(json.dumps({"name": "claim", "axes": AXES, "points": entries}))
    return tmp_path


def _ci(xs: list[float]) -> tuple[float, float]:
    mean = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
    return mean, t_quantile(0.975, len(xs) - 1) * sd / math.sqrt(len(xs))


def test_drops_are_paired_by_seed_and_skip_unfinished_seeds(study: Path) -> None:
    labels, rows = shifts(load_study(study), "probe_acc_avg", "data", "iid")
    assert labels == ["iid", "dir0.01"]
    by = {row.axes["algorithm"]: row for row in rows}
    ssl, sl = by["dec-ssl"], by["dec-sl"]
    mean, half = _ci([0.80 - 0.79, 0.82 - 0.80, 0.81 - 0.81])  # 3 seeds: the t 95% interval (a drop: not cut)
    drop = ssl.drops["dir0.01"]
    assert (drop.value, drop.low, drop.high) == pytest.approx((mean, mean - half, mean + half))
    assert drop.kind == "t 95% CI"
    pairs = [0.88 - 0.70, 0.86 - 0.74]  # seed 3 has no dir0.01 run: not paired; 2 seeds: the min–max, no t
    drop = sl.drops["dir0.01"]
    assert (drop.value, drop.low, drop.high, drop.kind) == (pytest.approx(sum(pairs) / 2), min(pairs), max(pairs),
                                                            "min–max")
    assert sl.pairs["dir0.01"] == 2 and ssl.pairs["dir0.01"] == 3
    assert sl.levels["iid"].value == pytest.approx(0.87) and sl.levels["dir0.01"].n == 2


def test_table_cli_and_bad_axis(study: Path, tmp_path: Path, capsys) -> None:
    md, table = shift_table(load_study(study), "probe_acc_avg", "data", "iid")
    assert "drop iid→dir0.01" in md and "| dec-sl | 0.870 [" in md and "±" not in md
    assert table.splitlines()[0].startswith("algorithm,iid_mean,iid_low,iid_high,iid_n,iid_interval,dir0.01_mean")
    out = tmp_path / "claim.md"
    assert main([str(study), "--out", str(out)]) == 0
    assert out.read_text().startswith("### probe_acc_avg") and (tmp_path / "claim-probe_acc_avg.csv").is_file()
    assert main([str(study), "--axis", "topology"]) == 2
    assert "no axis 'topology'" in capsys.readouterr().err


def test_contrast_is_the_difference_of_drops_paired_by_seed(study: Path, capsys) -> None:
    """dec-sl's drop minus dec-ssl's, seed by seed, over the seeds where all four runs finished (1 and 2)."""
    result = contrast(load_study(study), "probe_acc_avg", "data", "iid", "dec-ssl", "dec-sl")
    interval, seeds = result["dir0.01"]
    diffs = [(0.88 - 0.70) - (0.80 - 0.79), (0.86 - 0.74) - (0.82 - 0.80)]
    mean, low, high = sum(diffs) / 2, min(diffs), max(diffs)  # 2 seeds: the min–max, never a t-interval
    assert seeds == 2 and interval.value == pytest.approx(mean) and (interval.low, interval.high) == (low, high)
    flipped, _ = contrast(load_study(study), "probe_acc_avg", "data", "iid", "dec-sl", "dec-ssl")["dir0.01"]
    assert flipped.value == pytest.approx(-mean)
    assert main([str(study), "--contrast", "dec-ssl,dec-sl"]) == 0
    assert f"| A dec-ssl, B dec-sl | {mean:.3f} [{low:.3f}, {high:.3f}] (min–max, n=2) |" in capsys.readouterr().out
    assert main([str(study), "--contrast", "dec-ssl,moon"]) == 2
    assert "no row 'moon'" in capsys.readouterr().err
    assert main([str(study), "--contrast", "dec-ssl"]) == 2
