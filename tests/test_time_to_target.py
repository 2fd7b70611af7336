"""Simulated time in analysis: metrics against sim_time_s and the time to a target (analysis.target).

A small study folder is written here by hand (plan.json, runs/NAME/ by RunFolder with records from p2pfl.records,
plus the simulated clock's keys of issue 28): arm `clock` (3 seeds, one never reaches the target), arm `steady`
(3 seeds, all reach it) and arm `old` (2 seeds, written without the clock, as runs were before it). Every expected
number is worked out by hand below from the tables of each seed; values are dyadic, so exact in binary.
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from analysis import load_run, plot_run
from analysis.metric_plots import figure_axes
from analysis.plots import metrics_figure
from analysis.report import main as report_main
from analysis.study import load_study, t_quantile
from analysis.study_plots import held
from analysis.target import Target, first_reach, metric_lower_is_better
from p2pfl.config import make_config
from p2pfl.records import (
    SIM_COMPUTE,
    SIM_IDLE,
    SIM_ROUND,
    SIM_TIME,
    SIM_TRANSFER,
    eval_record,
    round_record,
    round_start,
    summary_record,
)
from p2pfl.runtime.runfolder import RunFolder

K = 4
T_975_DF1 = 12.706204736  # t_{0.975, 1}, from tables
T_975_DF2 = 4.303  # t_{0.975, 2}, from tables (4.302652730)
TARGET = 0.7
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


#: arm -> seed -> (accuracy per round 1..4, simulated seconds per round or None without the clock, bytes per peer
#: per round). `clock` seed 1 crosses 0.7 at round 3 (t = 1.5·3 = 4.5 s, 3·1024 B); seed 2 at round 2 (4 s,
#: 2·2048 B), dips below and crosses again at round 4 (the first crossing counts); seed 3 never does.
SEEDS: dict[str, dict[int, tuple[list[float], float | None, int]]] = {
    "clock": {1: ([0.25, 0.5, 0.75, 0.875], 1.5, 1024), 2: ([0.25, 0.75, 0.5, 0.875], 2.0, 2048),
              3: ([0.125, 0.25, 0.375, 0.5], 1.0, 1024)},
    "steady": {1: ([0.75, 0.75, 0.75, 0.75], 2.0, 512), 2: ([0.5, 0.75, 0.75, 0.75], 1.5, 512),
               3: ([0.5, 0.5, 0.5, 0.75], 1.75, 512)},
    "old": {1: ([0.5, 0.75, 0.75, 0.75], None, 256), 2: ([0.5, 0.5, 0.75, 0.75], None, 256)},
}
#: The training loss, lower is better: it reaches 0.5 at round 3 (0.375) though it starts above it (>= 0.5
#: would be round 1).
LOSS = [2.0, 1.0, 0.375, 0.5]


def point_name(arm: str, seed: int) -> str:
    return f"arm-{arm}__seed-{seed}"


def clock_keys(t: int, round_s: float) -> dict:
    """The simulated clock's keys of round t's record: every peer computes 3/4 of the round and idles the rest."""
    return {SIM_TIME: round_s * t, SIM_ROUND: round_s, SIM_COMPUTE: {str(i): 0.75 * round_s for i in range(K)},
            SIM_TRANSFER: {str(i): 0.0 for i in range(K)}, SIM_IDLE: {str(i): 0.25 * round_s for i in range(K)}}


def write_run(root: Path, name: str, seed: int, acc: list[float], round_s: float | None, sent: int) -> Path:
    """A run folder as the run writes it, with the clock's keys when round_s is given (round 0 at 0.0 s)."""
    rounds = len(acc)
    cfg = make_config(algorithm="fedavg", topology="cycle", peers=K, rounds=rounds, seed=seed, out=str(root),
                      name=name)
    folder = RunFolder(root / name, cfg)
    folder.log({**round_start(0.5), **({SIM_TIME: 0.0} if round_s is not None else {})})
    last = None
    for t in range(1, rounds + 1):
        record = round_record(
            t, 1.0 * t, range(K), {i: {"loss": 1.0} for i in range(K)}, 0.5 / t, {i: sent for i in range(K)},
            {i: sent for i in range(K)}, time_compute_s=1.0, time_comm_s=0.5, time_wait_s=0.1, time_local_s=0.9,
            round_s=1.0, time_schedule_s=0.001,
            network={"links": 2 * K, "digest": "0", "crashed": [], "rejoining": [], "straggling": [],
                     "degree": {str(i): 2 for i in range(K)}, "sigma2": 0.5})
        folder.log({**record, **(clock_keys(t, round_s) if round_s is not None else {})})
        last = eval_record(t, t == rounds, {"test_acc_avg": acc[t - 1], "test_loss_avg": LOSS[t - 1]}, {})
        folder.log({**last, **({SIM_TIME: round_s * t} if round_s is not None else {})})
    folder.write_summary(summary_record(
        algorithm="fedavg", topology="cycle", peers=K, rounds=rounds, ranks=1, wall_s=5.0, run_dir=str(root / name),
        final=last["metrics"], consensus_distance_initial=0.5, comm_per_rank=[], extra={},
        network={"kind": "static", "links_per_round": 2.0 * K, "topology_links_per_round": 2.0 * K, "crashed": []}))
    folder.close()
    return root / name


def write_study(root: Path, arms: list[str]) -> Path:
    """plan.json and the runs of ``arms``."""
    entries = []
    for arm in arms:
        for seed, (acc, round_s, sent) in SEEDS[arm].items():
            name = point_name(arm, seed)
            write_run(root / "runs", name, seed, acc, round_s, sent)
            entries.append({"name": name, "axes": {"arm": arm, "seed": str(seed)}, "options": {"seed": seed}})
    (root / "plan.json").write_text(json.dumps({"name": "clock", "axes": ["arm", "seed"], "points": entries}))
    return root


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    return write_study(tmp_path_factory.mktemp("study"), ["clock", "steady", "old"])


def read_table(path: Path) -> dict[str, dict[str, str]]:
    with open(path, newline="") as fh:
        return {row["arm"]: row for row in csv.DictReader(fh)}


def md_row(report: str, arm: str, section: str) -> list[str]:
    """The cells of ``arm``'s row in the markdown table after the heading that starts with ``section``."""
    lines = report[report.index(section):].splitlines()
    row = next(line for line in lines if line.startswith(f"| {arm} |"))
    return [c.strip() for c in row.strip("|").split("|")]


def t_interval(values: list[float], t: float) -> tuple[float, float, float]:
    """(mean, low, high) of mean ± t·s/√n, written out here, cut at 0 (no cost is negative)."""
    n = len(values)
    mean = sum(values) / n
    s = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, max(mean - t * s / math.sqrt(n), 0.0), mean + t * s / math.sqrt(n)


def assert_interval(row: dict[str, str], cost: str, expected: tuple[float, float, float], rel: float = 1e-9) -> None:
    """The mean to 1e-9 and its distances to both bounds to ``rel`` (a textbook t quantile has 4 digits)."""
    mean, low, high = (float(row[f"target_{cost}_{col}"]) for col in ("mean", "low", "high"))
    assert mean == pytest.approx(expected[0], rel=1e-9), cost
    assert (mean - low, high - mean) == pytest.approx((expected[0] - expected[1], expected[2] - expected[0]),
                                                      rel=rel), cost


# ----- the pieces -------------------------------------------------------------------------------------------------
def test_t_quantile_is_the_textbook_value():
    assert t_quantile(0.975, 2) == pytest.approx(T_975_DF2, abs=5e-4)
    assert t_quantile(0.975, 1) == pytest.approx(T_975_DF1, rel=1e-9)


def test_direction_of_metrics():
    for name in ("test_loss_avg", "loss_mean", "error", "consensus_distance", "distance_to_mean_peer_mean",
                 "drift_to_avg_peer_mean", "mean_shift"):
        assert metric_lower_is_better(name), name
    for name in ("test_acc_avg", "knn_acc_peer_mean", "probe_acc_avg", "task_metric_peer_mean", "accuracy"):
        assert not metric_lower_is_better(name), name
    assert Target.of("test_loss_avg", 0.5).lower and not Target.of("test_loss_avg", 0.5, "higher").lower
    assert Target.of("test_acc_avg", 0.5, "lower").lower


def test_first_reach_is_the_first_crossing_not_an_interpolated_one(study):
    target = Target.of("test_acc_avg", TARGET)
    one = first_reach(load_run(study / "runs" / point_name("clock", 1)), target)
    assert (one.round, one.sim_time_s, one.bytes_per_peer) == (3.0, 4.5, 3 * 1024.0)
    two = first_reach(load_run(study / "runs" / point_name("clock", 2)), target)
    assert (two.round, two.sim_time_s, two.bytes_per_peer) == (2.0, 4.0, 2 * 2048.0)
    assert first_reach(load_run(study / "runs" / point_name("clock", 3)), target) is None
    old = first_reach(load_run(study / "runs" / point_name("old", 2)), target)
    assert (old.round, old.sim_time_s, old.bytes_per_peer) == (3.0, None, 3 * 256.0)


def test_lower_is_better_reaches_from_above(study):
    run = load_run(study / "runs" / point_name("clock", 1))
    lower = first_reach(run, Target.of("test_loss_avg", 0.5))
    assert (lower.round, lower.sim_time_s) == (3.0, 4.5)
    assert first_reach(run, Target.of("test_loss_avg", 0.5, "higher")).round == 1.0


def test_held_keeps_the_last_value_within_the_span():
    assert held({1.0: 0.25, 3.0: 0.75}, [0.0, 1.0, 2.0, 3.0, 4.0]) == {1.0: 0.25, 2.0: 0.25, 3.0: 0.75}


# ----- the study report -------------------------------------------------------------------------------------------
def test_time_to_target_table(study, tmp_path):
    out = tmp_path / "report"
    assert report_main([str(study), "--metric", "test_acc_avg", "--target", str(TARGET), "--out", str(out),
                        "--no-plots"]) == 0
    table = read_table(out / "table.csv")

    # clock: seeds 1 and 2 reach it (4.5 s, round 3, 3 KiB; 4 s, round 2, 4 KiB), seed 3 is counted, not averaged
    clock = table["clock"]
    assert (clock["target"], clock["target_reached"], clock["target_seeds"]) == ("test_acc_avg ≥ 0.7", "2", "3")
    # two seeds: their min–max, no t-interval
    assert_interval(clock, "sim_time_s", (4.25, 4.0, 4.5))
    assert_interval(clock, "rounds", (2.5, 2.0, 3.0))
    assert_interval(clock, "bytes_per_peer", (3584.0, 3072.0, 4096.0))
    assert (clock["target_sim_time_s_n"], clock["target_sim_time_s_interval"]) == ("2", "min–max")

    # steady: all three reach it, at rounds 1, 2, 4 and 2·1, 1.5·2, 1.75·4 = 2, 3, 7 s; 512 B a round
    steady = table["steady"]
    assert (steady["target_reached"], steady["target_seeds"]) == ("3", "3")
    assert_interval(steady, "sim_time_s", t_interval([2.0, 3.0, 7.0], T_975_DF2), rel=2e-4)
    assert_interval(steady, "rounds", t_interval([1.0, 2.0, 4.0], T_975_DF2), rel=2e-4)
    assert_interval(steady, "bytes_per_peer", t_interval([512.0, 1024.0, 2048.0], T_975_DF2), rel=2e-4)

    # old runs, without the clock: rounds and bytes (rounds 2 and 3), no simulated time
    old = table["old"]
    assert (old["target_reached"], old["target_seeds"]) == ("2", "2")
    assert old["target_sim_time_s_mean"] == old["target_sim_time_s_low"] == ""
    assert float(old["target_rounds_mean"]) == 2.5 and float(old["target_bytes_per_peer_mean"]) == 2.5 * 256

    report = (out / "report.md").read_text()
    section = "## Time to target: test_acc_avg ≥ 0.7"
    assert "not averaged in" in report
    row = md_row(report, "clock", section)
    assert row[2] == "2/3 reached" and row[3] == "4.25 [4, 4.5] (min–max, n=2)" and row[4].startswith("2.5 [2, 3]")
    assert row[5] == f"{3584 / 2**20:.4g} [{3072 / 2**20:.4g}, {4096 / 2**20:.4g}] (min–max, n=2)"
    assert md_row(report, "old", section)[2:4] == ["2/2 reached", "–"]


def test_a_target_nobody_reaches_and_a_lower_is_better_one(study, tmp_path):
    out = tmp_path / "none"
    assert report_main([str(study), "--metric", "test_acc_avg", "--target", "0.9", "--out", str(out),
                        "--no-plots"]) == 0
    table = read_table(out / "table.csv")
    assert [table[a]["target_reached"] for a in ("clock", "steady", "old")] == ["0", "0", "0"]
    assert table["clock"]["target_rounds_mean"] == ""
    assert md_row((out / "report.md").read_text(), "clock", "## Time to target")[2:] == ["0/3 reached", "–", "–", "–"]

    loss = tmp_path / "loss"
    assert report_main([str(study), "--metric", "test_loss_avg", "--target", "0.5", "--out", str(loss),
                        "--no-plots"]) == 0
    table = read_table(loss / "table.csv")
    assert table["clock"]["target"] == "test_loss_avg ≤ 0.5"
    assert (table["clock"]["target_reached"], float(table["clock"]["target_rounds_mean"])) == ("3", 3.0)


def test_study_figures_against_simulated_time(study, tmp_path):
    out = tmp_path / "figures"
    assert report_main([str(study), "--metric", "test_acc_avg", "--out", str(out)]) == 0
    data = (out / "metric_time.png").read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 5000
    report = (out / "report.md").read_text()
    assert "](metric_time.png)" in report and "](metric_rounds.png)" in report and "](bytes.png)" in report
    assert "Time to target" not in report


def test_old_runs_report_as_before_without_time_figures(tmp_path):
    old = write_study(tmp_path / "old", ["old"])
    out = tmp_path / "report"
    assert report_main([str(old), "--metric", "test_acc_avg", "--out", str(out)]) == 0
    assert (out / "metric_rounds.png").is_file() and not (out / "metric_time.png").exists()
    header = (out / "table.csv").read_text().splitlines()[0]
    assert "target" not in header and "metric_time" not in (out / "report.md").read_text()


# ----- one run's plots --------------------------------------------------------------------------------------------
def test_run_plots_against_simulated_time(study, tmp_path):
    run = load_run(study / "runs" / point_name("clock", 1))
    assert run.has_sim_time
    written = {p.name for p in plot_run(run, tmp_path / "clock")}
    assert {"metrics.png", "metrics_time.png"} <= written
    fig = metrics_figure(run, SIM_TIME)
    axes = figure_axes(fig)
    assert axes["test_acc"].get_xlabel() == "simulated time (s)"
    (line,) = [ln for ln in axes["test_acc"].get_lines() if ln.get_label().startswith("network average")]
    assert list(line.get_xdata()) == [1.5, 3.0, 4.5, 6.0]


def test_old_run_plots_have_no_time_plot(study, tmp_path):
    run = load_run(study / "runs" / point_name("old", 1))
    assert not run.has_sim_time and metrics_figure(run, SIM_TIME) is None
    written = {p.name for p in plot_run(run, tmp_path / "old")}
    assert "metrics.png" in written and "metrics_time.png" not in written


def test_target_on_run_folders_is_a_note(study, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert report_main([str(study / "runs" / point_name("clock", 1)), "--target", "0.7", "--no-plots"]) == 0
    assert "--target applies to study folders only" in capsys.readouterr().err
    assert load_study(study).groups[0].n_done == 3


def test_bytes_per_peer_of_an_async_run_divide_by_every_peer_not_the_batch() -> None:
    """A synchronous round's bytes are shared by its active peers; an asynchronous round (a batch of pairs, its
    `active` the pairs' ends) by every peer of the run: 2 of 4 peers exchanged 100 B each, 50 B a peer."""
    from types import SimpleNamespace

    from analysis.runs import cumulative_bytes_per_peer

    sync = {"round": 1, "bytes_sent": 200, "active": [0, 1], "bytes_sent_per_peer": {"0": 100, "1": 100}}
    batch = {"round": 1, "bytes_sent": 200, "active": [0, 1], "async_events": [[0, 1, 1.0, 1, 0]],
             "bytes_sent_per_peer": {"0": 100, "1": 100, "2": 0, "3": 0}}
    assert cumulative_bytes_per_peer(SimpleNamespace(rounds=[sync])) == {0.0: 0.0, 1.0: 100.0}
    assert cumulative_bytes_per_peer(SimpleNamespace(rounds=[batch])) == {0.0: 0.0, 1.0: 50.0}
