"""The peers' models first, and comparison figures (issue 56, items 2 and 4): the study report leads with the peers'
mean and worst peer with the network average beside them, studies score the peers at every evaluation unless
told otherwise, the progress line says which round its evaluation is from, `--compare AXIS` draws the arms of an
axis on one axis, every multi-panel figure shares y, legends sit off the data, a gossip-alone prediction is drawn
only where it bounds and only over the measured rounds, and bytes spanning more than two decades go on a log x.

A study folder is written here by hand (plan.json, runs/NAME/ by RunFolder with records from p2pfl.records, as
tests/test_report_intervals.py does): a `topology` axis (ring, star, complete) x 3 seeds, 4 rounds.
"""
from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

import analysis.study_plots as study_plots
from analysis.report import main as report_main
from analysis.runs import Run
from analysis.study import headline_metric, load_study, ordered_metrics
from analysis.study_plots import (
    bytes_figure,
    compare_figure,
    contraction,
    plot_consensus,
    plot_metric_rounds,
    prediction_within,
)
from analysis.style import LOG_Y_PAD
from p2pfl.config import make_config
from p2pfl.records import eval_record, round_record, round_start, summary_record
from p2pfl.runtime.runfolder import RunFolder
from p2pfl.study.plan import expand, point_options

from conftest import run_job

K, ROUNDS, SEEDS = 4, 4, (1, 2, 3)
#: topology -> (its accuracy level, σ2 of its rounds): the star's σ2 > 1, as a row-stochastic W's can be.
TOPOLOGIES = {"ring": (0.5, 0.1), "star": (0.6, 1.2), "complete": (0.8, 0.1)}
#: The round whose consensus distance is not recorded: the measured range ends at ROUNDS - 1.
UNMEASURED = ROUNDS


def metrics_at(level: float, t: int, seed: int) -> dict[str, float]:
    acc = min(1.0, level + 0.02 * t + 0.01 * seed)
    return {"test_acc_avg": acc, "test_acc_peer_mean": acc - 0.2, "test_acc_peer_min": acc - 0.4,
            "test_acc_peer_max": acc - 0.05}


def write_run(root: Path, name: str, seed: int, level: float, sigma2: float, sent: int | None) -> None:
    """A finished run folder: round records (σ2, the bytes each peer sent: ``sent``, else 10^t), consensus
    distance 0.5/t³ (none at UNMEASURED), an eval record per round."""
    cfg = make_config(algorithm="fedavg", topology="cycle", peers=K, rounds=ROUNDS, seed=seed, out=str(root),
                      name=name)
    folder = RunFolder(root / name, cfg)
    folder.log(round_start(0.5))
    last = None
    for t in range(1, ROUNDS + 1):
        size = sent if sent is not None else 10 ** t
        folder.log(round_record(
            t, 1.0 * t, range(K), {i: {"loss": 1.0} for i in range(K)}, None if t == UNMEASURED else 0.5 / t ** 3,
            {i: size for i in range(K)}, {i: size for i in range(K)}, time_compute_s=1.0, time_comm_s=0.5,
            time_wait_s=0.1, time_local_s=0.9, round_s=1.0, time_schedule_s=0.001,
            network={"links": 2 * K, "digest": "0", "crashed": [], "rejoining": [], "straggling": [],
                     "degree": {str(i): 2 for i in range(K)}, "sigma2": sigma2}))
        last = eval_record(t, t == ROUNDS, metrics_at(level, t, seed), {})
        folder.log(last)
    folder.write_summary(summary_record(
        algorithm="fedavg", topology="cycle", peers=K, rounds=ROUNDS, ranks=1, wall_s=5.0, run_dir=str(root / name),
        final=last["metrics"], consensus_distance_initial=0.5, comm_per_rank=[], extra={},
        network={"kind": "static", "links_per_round": 2.0 * K, "topology_links_per_round": 2.0 * K, "crashed": []}))
    folder.close()


def write_study(root: Path, sent: int | None = 1024) -> Path:
    entries = []
    for topology, (level, sigma2) in TOPOLOGIES.items():
        for seed in SEEDS:
            name = f"topology-{topology}__seed-{seed}"
            write_run(root / "runs", name, seed, level, sigma2, sent)
            entries.append({"name": name, "axes": {"topology": topology, "seed": str(seed)},
                            "options": {"seed": seed}})
    (root / "plan.json").write_text(json.dumps({"name": "compare", "axes": ["topology", "seed"],
                                                "points": entries}))
    return root


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory) -> Path:
    return write_study(tmp_path_factory.mktemp("study"))


@pytest.fixture
def saved(monkeypatch) -> dict[str, object]:
    """The figures study_plots saves, by file name, instead of writing them."""
    figures: dict[str, object] = {}

    def fake_save(fig, path):
        figures[Path(path).name] = fig
        return Path(path)

    monkeypatch.setattr(study_plots, "save", fake_save)
    return figures


# ----- item 2: the peers' models first ------------------------------------------------------------------------------
def test_tables_and_headline_lead_with_the_peers_then_the_network_average(study_dir, tmp_path):
    assert report_main([str(study_dir), "--out", str(tmp_path / "r"), "--no-plots"]) == 0
    with open(tmp_path / "r" / "table.csv", newline="") as fh:
        header = next(csv.reader(fh))
    metric_columns = [h.removesuffix("_mean") for h in header if h.endswith("_mean") and h.startswith("test_acc")]
    assert metric_columns[:3] == ["test_acc_peer_mean", "test_acc_peer_min", "test_acc_avg"]
    assert metric_columns.index("test_acc_peer_max") > metric_columns.index("test_acc_avg")  # kept, after
    text = (tmp_path / "r" / "report.md").read_text()
    table = [line for line in text.splitlines() if line.startswith("| topology")][0]
    cols = [c.strip() for c in table.strip("|").split("|")]
    assert cols.index("test_acc_peer_mean") < cols.index("test_acc_peer_min") < cols.index("test_acc_avg")
    assert "test_acc_peer_max" not in cols  # the best peer: table.csv only
    lead = text.split("\n\n")[1]
    assert lead.startswith("Headline: test accuracy, peers' mean (`test_acc_peer_mean`) and the worst peer "
                           "(`test_acc_peer_min`)") and "a model no peer holds" in lead
    assert headline_metric(load_study(study_dir)) == "test_acc_peer_mean"


def test_metric_still_chooses_the_headline(study_dir, tmp_path):
    assert report_main([str(study_dir), "--out", str(tmp_path / "r"), "--no-plots", "--metric", "test_acc_avg"]) == 0
    text = (tmp_path / "r" / "report.md").read_text()
    assert "Headline: test accuracy, network average (`test_acc_avg`)" in text
    with open(tmp_path / "r" / "table.csv", newline="") as fh:
        header = next(csv.reader(fh))
    assert [h for h in header if h.startswith("test_acc") and h.endswith("_mean")][0] == "test_acc_peer_mean_mean"
    assert "the peers' own models are in `test_acc_peer_mean` and `test_acc_peer_min`" in text


def test_loss_like_quantities_take_the_highest_peer_as_the_worst():
    assert ordered_metrics(["drift_to_avg_peer_min", "drift_to_avg_peer_max", "drift_to_avg_peer_mean", "zeta2",
                            "test_acc_avg", "test_acc_peer_max", "test_acc_peer_min", "test_acc_peer_mean"],
                           lead="test_acc_peer_mean") == [
        "test_acc_peer_mean", "test_acc_peer_min", "test_acc_avg", "test_acc_peer_max",
        "drift_to_avg_peer_mean", "drift_to_avg_peer_max", "drift_to_avg_peer_min", "zeta2"]


def test_a_study_point_scores_the_peers_at_every_evaluation_unless_the_study_says():
    assert point_options({"algorithm": "fedavg"})["peer_scores"] == "every"
    assert point_options({"algorithm": "fedavg", "peer_scores": "final"})["peer_scores"] == "final"
    assert "peer_scores" not in point_options({"algorithm": "consensus"})  # scores every peer already
    plan = expand({"base": {"algorithm": "fedavg"}, "axes": {"seed": [0, 1]}})
    assert [p.options["peer_scores"] for p in plan.points] == ["every", "every"]
    assert all("peer_scores" not in p.varied for p in plan.points)
    plan = expand({"base": {"algorithm": "fedavg", "peer-scores": "final"}, "axes": {"seed": [0]}})
    assert plan.points[0].options["peer_scores"] == "final"
    plan = expand({"base": {"algorithm": "fedavg"}, "axes": {"scoring": [{"label": "f", "peer-scores": "final"},
                                                                         {"label": "e"}]}})
    assert [p.options["peer_scores"] for p in plan.points] == ["final", "every"]


def test_the_progress_line_says_which_round_its_evaluation_is_from(tmp_path):
    proc = run_job(["-m", "p2pfl.run", "--algorithm", "consensus", "--peers", "4", "--vector-size", "10",
                    "--rounds", "10", "--eval-every", "3", "--progress", "--no-plots", "--out", str(tmp_path),
                    "--name", "p"], ranks=0)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stdout.splitlines() if re.search(r": round \d+/10,", line)]
    assert len(lines) == 10
    for line in lines:
        t = int(re.search(r"round (\d+)/10", line).group(1))
        last = max((r for r in (3, 6, 9) if r < t), default=None)
        at = re.search(r"eval @r(\d+): distance_to_mean_peer_mean=", line)
        assert (at is None) == (last is None), line
        if at is not None:
            assert int(at.group(1)) == last, line
    assert any("round 5/10" in line and "eval @r3:" in line for line in lines)


# ----- item 4: comparison figures -----------------------------------------------------------------------------------
def test_compare_topology_draws_one_line_per_topology_on_one_axis(study_dir, tmp_path, saved):
    assert report_main([str(study_dir), "--out", str(tmp_path / "r"), "--compare", "topology"]) == 0
    fig = saved["compare-topology.png"]
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["test accuracy, peers' mean", "test accuracy, lowest peer", "test accuracy, network average"]
    for ax in fig.axes:
        assert sorted(line.get_label() for line in ax.lines) == sorted(TOPOLOGIES)
        assert len(ax.collections) == len(TOPOLOGIES)  # each line's band over the seeds
    assert len({ax.get_ylim() for ax in fig.axes}) == 1
    low, high = fig.axes[0].get_ylim()
    assert 0.0 <= low and high <= 1.0  # an accuracy's range
    assert "compare-topology.png" in (tmp_path / "r" / "report.md").read_text()


def test_compare_refuses_an_axis_the_study_lacks(study_dir, tmp_path, capsys):
    assert report_main([str(study_dir), "--out", str(tmp_path / "r"), "--compare", "lr"]) == 2
    assert "--compare lr: not an axis of the study; its axes: topology" in capsys.readouterr().err


def legend_boxes(fig) -> list:
    return [leg.get_window_extent() for leg in [*fig.legends, *(ax.get_legend() for ax in fig.axes)] if leg]


def points_drawn(fig) -> list[tuple[float, float]]:
    """Every plotted data point of every panel, in display coordinates."""
    out = []
    for ax in fig.axes:
        for line in ax.lines:
            if len(line.get_xdata()):
                out += [tuple(p) for p in ax.transData.transform(line.get_xydata())]
    return out


def test_multi_panel_figures_share_y_and_keep_their_legends_off_the_data(study_dir, saved):
    study = load_study(study_dir)
    out = Path("unused")
    plot_metric_rounds(study, "test_acc_peer_mean", out)
    plot_consensus(study, out)
    figures = [saved["metric_rounds.png"], saved["consensus.png"],
               compare_figure(study, "topology", "test_acc_peer_mean"), bytes_figure(study, "test_acc_peer_mean")]
    for fig in figures:
        fig.canvas.draw()
        if len(fig.axes) > 1:
            assert len({ax.get_ylim() for ax in fig.axes}) == 1, fig.axes[0].get_title()
        boxes = legend_boxes(fig)
        assert boxes
        for box in boxes:
            for ax in fig.axes:
                assert not box.overlaps(ax.get_window_extent())  # outside every panel
            assert not any(box.contains(x, y) for x, y in points_drawn(fig))


def test_a_prediction_is_drawn_only_where_it_bounds_and_only_over_the_measured_rounds(study_dir, saved):
    study = load_study(study_dir)
    plot_consensus(study, Path("unused"))
    fig = saved["consensus.png"]
    panels = {ax.get_title(): ax for ax in fig.axes}
    predictions = {t: [line for line in ax.lines if line.get_label().endswith("σ2(W_t)²")]
                   for t, ax in panels.items()}
    assert predictions["star"] == []  # σ2 = 1.2: the product rises
    legend_text = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert any(t.startswith("mean over seeds: no gossip-alone prediction: σ2(W) > 1") for t in legend_text)
    for topology in ("ring", "complete"):
        (line,) = predictions[topology]
        xs = list(line.get_xdata())
        assert min(xs) == 0 and max(xs) == UNMEASURED - 1  # not on to round 4, which measured nothing
        measured = [0.5] + [0.5 / t ** 3 for t in range(1, UNMEASURED)]
        low, high = panels[topology].get_ylim()
        assert panels[topology].get_yscale() == "log"
        assert low >= min(measured) / LOG_Y_PAD * 0.999 and high <= max(measured) * LOG_Y_PAD * 1.001
        assert min(line.get_ydata()) < low  # the prediction falls below: clipped, not stretching the axis
    assert contraction(([0, 1, 2], [1.0, 0.25, 0.0625])) == 0.25
    assert contraction(([0, 1], [1.0, 1.44])) >= 1
    assert Run.prediction_rises(([0, 1], [1.0, 1.44]))
    # σ2 = 1 of a disconnected doubly stochastic round (one-peer exponential, K = 16: computed 1 + 4e-16) is flat
    assert not Run.prediction_rises(([0, 1, 2], [1.0, 1.0000000000000004, 0.25]))
    assert prediction_within(([0, 1, 2, 3], [1.0, 0.5, 0.0, 0.1]), 0, 2) == ([0, 1], [1.0, 0.5])


def test_bytes_spanning_more_than_two_decades_take_a_log_x(study_dir, tmp_path):
    flat = bytes_figure(load_study(study_dir), "test_acc_peer_mean")
    assert flat.axes[0].get_xscale() == "linear"  # 1, 2, 3, 4 KiB: 4x
    wide = bytes_figure(load_study(write_study(tmp_path / "wide", sent=None)), "test_acc_peer_mean")
    assert wide.axes[0].get_xscale() == "log"  # 10 B to 11 KiB: over 1000x
    assert "log scale" in wide.axes[0].get_xlabel()
