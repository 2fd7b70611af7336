"""Honest intervals in the study report (issue 56, item 3): no t-interval below 3 seeds, a named interval from 3 on
that an accuracy's never leaves [0, 1], --aggregate iqm, and constant columns noted instead of shown.

A study folder is written here by hand (plan.json, runs/NAME/ by RunFolder with records from p2pfl.records, as
tests/test_time_to_target.py does): arm `pair` (2 seeds), arm `three` (3 seeds), arm `many` (8 seeds). Every
expected number is computed here from the values below, not by the code under test.
"""
from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from analysis.intervals import cell, estimate, iqm
from analysis.report import main as report_main
from analysis.study import load_study
from p2pfl.config import make_config
from p2pfl.records import eval_record, round_record, round_start, summary_record
from p2pfl.runtime.runfolder import RunFolder

K = 4
T_975_DF2 = 4.302652730  # t_{0.975, 2}, from tables
T_975_DF1 = 12.706204736  # t_{0.975, 1}, from tables
#: arm -> per seed (test accuracy, zeta2, best_cluster); peers_scored is 16 in every run (a constant column),
#: best_cluster 1 in every run but one (not constant).
ARMS: dict[str, list[tuple[float, float, float]]] = {
    "pair": [(0.61, 2.5, 1.0), (0.77, 23.26, 1.0)],
    "three": [(0.98, 10.0, 1.0), (0.99, 12.0, 2.0), (0.2, 14.0, 1.0)],
    "many": [(0.99, 5.0, 1.0), (0.1, 5.0, 1.0), (0.7, 5.0, 1.0), (0.55, 5.0, 1.0), (0.6, 6.0, 1.0),
             (0.72, 6.0, 1.0), (0.5, 6.0, 1.0), (0.65, 6.0, 1.0)],
}
PEERS_SCORED = 16.0


def point_name(arm: str, seed: int) -> str:
    return f"arm-{arm}__seed-{seed}"


def write_run(root: Path, name: str, seed: int, final: dict[str, float], rounds: int = 2) -> None:
    """A finished run folder as the run writes it: round records (bytes sent) and an eval record per round, the
    last one final with ``final``'s metrics."""
    cfg = make_config(algorithm="fedavg", topology="cycle", peers=K, rounds=rounds, seed=seed, out=str(root),
                      name=name)
    folder = RunFolder(root / name, cfg)
    folder.log(round_start(0.5))
    last = None
    for t in range(1, rounds + 1):
        folder.log(round_record(
            t, 1.0 * t, range(K), {i: {"loss": 1.0} for i in range(K)}, 0.5 / t, {i: 1024 for i in range(K)},
            {i: 1024 for i in range(K)}, time_compute_s=1.0, time_comm_s=0.5, time_wait_s=0.1, time_local_s=0.9,
            round_s=1.0, time_schedule_s=0.001,
            network={"links": 2 * K, "digest": "0", "crashed": [], "rejoining": [], "straggling": [],
                     "degree": {str(i): 2 for i in range(K)}, "sigma2": 0.5}))
        last = eval_record(t, t == rounds, final, {})
        folder.log(last)
    folder.write_summary(summary_record(
        algorithm="fedavg", topology="cycle", peers=K, rounds=rounds, ranks=1, wall_s=5.0, run_dir=str(root / name),
        final=last["metrics"], consensus_distance_initial=0.5, comm_per_rank=[], extra={},
        network={"kind": "static", "links_per_round": 2.0 * K, "topology_links_per_round": 2.0 * K, "crashed": []}))
    folder.close()


def write_study(root: Path, arms: list[str]) -> Path:
    entries = []
    for arm in arms:
        for seed, (acc, zeta2, cluster) in enumerate(ARMS[arm], start=1):
            name = point_name(arm, seed)
            write_run(root / "runs", name, seed, {"test_acc_avg": acc, "zeta2": zeta2, "best_cluster": cluster,
                                                  "peers_scored": PEERS_SCORED})
            entries.append({"name": name, "axes": {"arm": arm, "seed": str(seed)}, "options": {"seed": seed}})
    (root / "plan.json").write_text(json.dumps({"name": "intervals", "axes": ["arm", "seed"], "points": entries}))
    return root


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    return write_study(tmp_path_factory.mktemp("study"), list(ARMS))


def report(study: Path, out: Path, *flags: str) -> tuple[dict[str, dict[str, str]], str]:
    """table.csv by arm and report.md of ``analysis.report STUDY --no-plots``."""
    assert report_main([str(study), "--out", str(out), "--no-plots", *flags]) == 0
    with open(out / "table.csv", newline="") as fh:
        table = {row["arm"]: row for row in csv.DictReader(fh)}
    return table, (out / "report.md").read_text()


def md_table(text: str) -> tuple[list[str], dict[str, list[str]]]:
    """The groups table of report.md: its header and its rows by arm (cells split on unescaped pipes: a header
    such as the spectral gap's 1 − \\|λ2\\| escapes its own)."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    split = [[c.strip() for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])] for line in lines]
    header = split[0]
    return header, {row[0]: row for row in split[1:] if row[0] in ARMS}


def values(arm: str, i: int) -> list[float]:
    return [seed[i] for seed in ARMS[arm]]


def test_two_seeds_give_the_min_max_with_n_not_a_t_interval(study, tmp_path):
    table, text = report(study, tmp_path / "r")
    acc, zeta = values("pair", 0), values("pair", 1)
    mean, low, high = sum(acc) / 2, min(acc), max(acc)
    row = table["pair"]
    assert float(row["test_acc_avg_mean"]) == pytest.approx(mean, rel=1e-12)
    assert (float(row["test_acc_avg_low"]), float(row["test_acc_avg_high"])) == (low, high)
    assert (row["test_acc_avg_n"], row["test_acc_avg_interval"]) == ("2", "min–max")
    # the t-interval it replaces leaves [0, 1]: 0.69 ± 12.7·0.08 (s = 0.08·√2, /√2)
    assert mean + T_975_DF1 * (abs(acc[0] - acc[1]) / math.sqrt(2)) / math.sqrt(2) > 1.0
    header, rows = md_table(text)
    cells = dict(zip(header, rows["pair"]))
    assert cells["test_acc_avg"] == f"{mean:.4g} [{low:.4g}, {high:.4g}] (min–max, n=2)" == \
        "0.69 [0.61, 0.77] (min–max, n=2)"
    assert cells["zeta2"] == f"{sum(zeta) / 2:.4g} [{min(zeta):.4g}, {max(zeta):.4g}] (min–max, n=2)"
    assert not any("±" in c or "CI, n=2" in c for row in rows.values() for c in row)
    assert "at n = 2 it is the min–max of the two values" in text


def test_three_seeds_name_a_t_interval_cut_to_the_metric_range(study, tmp_path):
    table, text = report(study, tmp_path / "r")
    row = table["three"]
    # zeta2 10, 12, 14: mean 12, s = 2, not cut (zeta2 >= 0)
    half = T_975_DF2 * 2.0 / math.sqrt(3)
    assert (row["zeta2_n"], row["zeta2_interval"]) == ("3", "t 95% CI")
    assert float(row["zeta2_mean"]) == pytest.approx(12.0, rel=1e-12)
    assert float(row["zeta2_low"]) == pytest.approx(12.0 - half, rel=1e-9)
    assert float(row["zeta2_high"]) == pytest.approx(12.0 + half, rel=1e-9)
    # accuracy 0.98, 0.99, 0.2: the t-interval reaches below 0 and above 1, the report's stays in [0, 1]
    acc = values("three", 0)
    mean = sum(acc) / 3
    s = math.sqrt(sum((a - mean) ** 2 for a in acc) / 2)
    t_low, t_high = mean - T_975_DF2 * s / math.sqrt(3), mean + T_975_DF2 * s / math.sqrt(3)
    assert t_low < 0.0 and t_high > 1.0
    low, high = float(row["test_acc_avg_low"]), float(row["test_acc_avg_high"])
    assert (low, high) == (0.0, 1.0) and low <= float(row["test_acc_avg_mean"]) <= high
    _, rows = md_table(text)
    assert f"{mean:.4g} [0, 1] (t 95% CI, n=3)" in rows["three"]
    assert "t 95% CI, mean ± t_0.975,n−1·s/√n" in text  # the method, above the table


def test_a_constant_column_leaves_the_table_for_a_note(study, tmp_path):
    table, text = report(study, tmp_path / "r")
    header, rows = md_table(text)
    assert "peers_scored" not in header and "zeta2" in header
    assert "best_cluster" in header  # 1 in every run but one: not constant, kept
    assert text.count("constant in every run that reports it: peers_scored = 16\n") == 1
    assert len({len(r) for r in rows.values()} | {len(header)}) == 1
    # table.csv keeps every metric
    assert float(table["pair"]["peers_scored_mean"]) == PEERS_SCORED


def test_constant_among_the_runs_that_report_it():
    """A study of two tasks, one without peers to score: peers_scored = 24 wherever it is reported is constant (a
    note, not a column); a metric of one run alone, or one that varies, is not."""
    from types import SimpleNamespace

    from analysis.study import DONE, constant_metrics

    finals = [{"acc": 0.5, "peers_scored": 24.0, "once": 1.0}, {"acc": 0.7, "peers_scored": 24.0},
              {"acc": 0.6, "error": 0.1}, {"acc": 0.6, "error": 0.2}]
    points = [SimpleNamespace(state=DONE, final_metrics=lambda f=f: f) for f in finals]
    study = SimpleNamespace(points=points)
    assert constant_metrics(study, ["acc", "peers_scored", "once", "error"]) == {"peers_scored": 24.0}


def test_iqm_is_the_mean_of_the_middle_half():
    eight = values("many", 0)
    middle = sorted(eight)[2:6]
    assert iqm(eight) == pytest.approx(sum(middle) / 4, rel=1e-12) == pytest.approx(0.625)
    five = [5.0, 1.0, 4.0, 100.0, 2.0]  # one cut from each end: 2, 4, 5
    assert iqm(five) == pytest.approx(11.0 / 3, rel=1e-12)
    assert iqm([1.0, 7.0, 2.0]) == pytest.approx(10.0 / 3, rel=1e-12)  # below 4 values: the mean


def test_aggregate_iqm_with_a_reproducible_bootstrap_interval(study, tmp_path):
    from scipy.stats import bootstrap, trim_mean

    table, text = report(study, tmp_path / "r", "--aggregate", "iqm")
    eight = values("many", 0)
    row = table["many"]
    assert "test_acc_avg_mean" not in row
    value, low, high = (float(row[f"test_acc_avg_{c}"]) for c in ("iqm", "low", "high"))
    assert value == pytest.approx(0.625, rel=1e-12) and value != pytest.approx(sum(eight) / 8)
    assert (row["test_acc_avg_n"], row["test_acc_avg_interval"]) == ("8", "bootstrap 95% CI")
    # a percentile interval: around the IQM, within the values' min–max, so within [0, 1]; narrower than it
    assert min(eight) <= low <= value <= high <= max(eight) and (low, high) != (min(eight), max(eight))
    # the same resampling, done here: 9999 percentile resamples of the sorted values, generator seeded with 0
    ref = bootstrap((np.sort(eight),), lambda x, axis: trim_mean(x, 0.25, axis=axis), vectorized=True,
                    n_resamples=9999, confidence_level=0.95, method="percentile", rng=np.random.default_rng(0))
    assert (low, high) == (ref.confidence_interval.low, ref.confidence_interval.high)
    # n = 2 under iqm: the mean of the two, and the min–max
    assert float(table["pair"]["test_acc_avg_iqm"]) == pytest.approx(0.69, rel=1e-12)
    assert table["pair"]["test_acc_avg_interval"] == "min–max"
    assert "Cells: IQM (interquartile mean" in text and "bootstrap 95% CI, n=8)" in text
    # reproducible: a second report is the same table, bit for bit
    again, _ = report(study, tmp_path / "again", "--aggregate", "iqm")
    assert again == table


def test_estimate_cells_and_bounds():
    assert cell(estimate([0.5])) == "0.5 (n=1)" and cell(None) == "–"
    assert estimate([]) is None
    one = estimate([0.3, 0.5], bounds=(0.0, 1.0))
    assert (one.low, one.high, one.kind) == (0.3, 0.5, "min–max")
    nan = estimate([0.3, float("nan"), 0.5])
    assert math.isnan(nan.value) and nan.low is None and cell(nan) == "nan (n=3)"
    with pytest.raises(ValueError, match="aggregate 'median'"):
        estimate([1.0, 2.0], "median")


def test_figure_captions_say_the_tables_words(study, tmp_path):
    from analysis.study_plots import bytes_figure, spread_words

    loaded = load_study(study)
    words = spread_words(loaded)
    assert words == "t 95% CI over seeds, n\u00a0=\u00a03–8; min–max where n\u00a0=\u00a02"
    assert spread_words(loaded, "iqm").startswith("bootstrap 95% CI over seeds, n\u00a0=\u00a03–8")
    fig = bytes_figure(loaded, "test_acc_avg")
    (ax,) = fig.axes
    assert f"(mean, {words})" in ax.get_title().replace("\n", " ")
    assert f"shaded: {words}" in [t.get_text() for t in ax.get_legend().get_texts()]
    pairs = load_study(write_study(tmp_path / "pairs", ["pair"]))
    assert spread_words(pairs) == "min–max over seeds: n\u00a0=\u00a02, no CI at n\u00a0<\u00a03"


def test_the_figures_draw_under_iqm(study, tmp_path, capsys):
    out = tmp_path / "figures"
    assert report_main([str(study), "--out", str(out), "--aggregate", "iqm"]) == 0
    assert "failed" not in capsys.readouterr().err
    for name in ("metric_rounds.png", "consensus.png", "bytes.png"):
        assert (out / name).read_bytes().startswith(b"\x89PNG\r\n\x1a\n"), name
