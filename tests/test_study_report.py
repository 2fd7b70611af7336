"""The study report (analysis.study): a small real study folder, its table against hand computations.

The study is built as p2pfl.study lays it out: plan.json written here by hand, runs/NAME/ by real tiny runs
(p2pfl.run.main in this process), logs/NAME.{log,rc} for a failed point; one point is never started.
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from analysis.report import main as report_main
from analysis.study import MEASURES, load_study, mean_ci, spectral_gap, t_quantile
from p2pfl.run import main as run_main

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
T_975_DF1 = 12.706204736  # t_{0.975, 1}, from tables
T_975_DF2 = 4.302652730
RUN_OPTIONS = ["--algorithm", "fedavg", "--dataset", "synthetic", "--peers", "4", "--rounds", "3",
               "--train-subset", "240", "--batch-size", "16", "--local-steps", "2", "--eval-every", "1",
               "--no-progress", "--no-plots"]
AXES = ["topology", "data", "seed"]
#: (topology, seed, what happens): cycle and complete x 2 seeds; complete's third seed fails; star has one
#: finished seed (n = 1: no interval) and one never started.
POINTS = [("cycle", 1, "run"), ("cycle", 2, "run"), ("complete", 1, "run"), ("complete", 2, "run"),
          ("complete", 3, "fail"), ("star", 1, "run"), ("star", 2, "missing")]
ERROR_LINE = "RuntimeError: out of memory on rank 0"
METRIC = "test_acc_avg"


def point_name(topology: str, seed: int) -> str:
    return f"topology-{topology}__data-synthetic__seed-{seed}"


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("study")
    (root / "logs").mkdir()
    entries = []
    for topology, seed, what in POINTS:
        name = point_name(topology, seed)
        options = [*RUN_OPTIONS, "--topology", topology, "--seed", str(seed)]
        entries.append({"name": name, "axes": {"topology": topology, "data": "synthetic", "seed": str(seed)},
                        "options": {"topology": topology, "seed": seed}})
        if what == "run":
            assert run_main([*options, "--out", str(root / "runs"), "--name", name]) == 0
            (root / "logs" / f"{name}.rc").write_text("0\n")
        elif what == "fail":
            (root / "logs" / f"{name}.log").write_text(
                "p2pfl: fedavg on complete\r 33%|###  | 1/3\nTraceback (most recent call last):\n"
                '  File "p2pfl/run.py", line 1, in <module>\n' + ERROR_LINE + "\n")
            (root / "logs" / f"{name}.rc").write_text("1\n")
    (root / "plan.json").write_text(json.dumps({"name": "tiny", "axes": AXES, "points": entries}))
    (root / "study.yaml").write_text("name: tiny\n")
    return root


def summary_final(study: Path, topology: str, seed: int) -> dict[str, float]:
    return json.loads((study / "runs" / point_name(topology, seed) / "summary.json").read_text())["final"]


def read_table(path: Path) -> dict[str, dict[str, str]]:
    with open(path, newline="") as fh:
        return {row["topology"]: row for row in csv.DictReader(fh)}


def metropolis(adjacency: np.ndarray) -> np.ndarray:
    """W_ij = 1/(1 + max(d_i, d_j)) on edges, the rest on the diagonal (written here, not imported)."""
    deg = adjacency.sum(axis=1)
    w = np.where(adjacency > 0, 1.0 / (1.0 + np.maximum.outer(deg, deg)), 0.0)
    return w + np.diag(1.0 - w.sum(axis=1))


def test_t_quantile_and_interval():
    assert t_quantile(0.975, 1) == pytest.approx(T_975_DF1, rel=1e-9)
    assert t_quantile(0.975, 2) == pytest.approx(T_975_DF2, rel=1e-9)
    iv = mean_ci([1.0, 2.0, 6.0])
    s = math.sqrt(((1 - 3) ** 2 + (2 - 3) ** 2 + (6 - 3) ** 2) / 2)
    assert iv.mean == 3.0 and iv.n == 3
    assert iv.high == pytest.approx(3 + T_975_DF2 * s / math.sqrt(3), rel=1e-9)
    assert iv.low == pytest.approx(3 - T_975_DF2 * s / math.sqrt(3), rel=1e-9)
    single = mean_ci([0.5])
    assert (single.mean, single.low, single.high) == (0.5, None, None)
    assert mean_ci([]) is None


def test_spectral_gap_closed_forms():
    # cycle(4) Metropolis: circulant 1/3·(I + S + S⁻¹), eigenvalues 1/3 + 2/3·cos(2πk/4) = 1, 1/3, −1/3, 1/3
    cycle = np.array([[0, 1, 0, 1], [1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 1, 0]])
    assert np.allclose(metropolis(cycle), np.full((4, 4), 1 / 3) * (cycle + np.eye(4)))
    assert spectral_gap(metropolis(cycle)) == pytest.approx(2 / 3)
    # complete(4): W = J/4, eigenvalues 1, 0, 0, 0; star(4): 1, 3/4, 3/4, 0
    assert spectral_gap(metropolis(np.ones((4, 4)) - np.eye(4))) == pytest.approx(1.0)
    star = np.zeros((4, 4))
    star[0, 1:] = star[1:, 0] = 1
    assert spectral_gap(metropolis(star)) == pytest.approx(1 / 4)


def test_study_loading(study):
    loaded = load_study(study)
    assert loaded.name == "tiny" and loaded.group_axes == ["topology", "data"]
    assert [g.axes["topology"] for g in loaded.groups] == ["cycle", "complete", "star"]
    assert [(g.n_done, g.n_expected) for g in loaded.groups] == [(2, 2), (2, 3), (1, 2)]
    # the gap of each group comes from its runs' manifests and matches the closed forms above
    assert [g.spectral_gap for g in loaded.groups] == pytest.approx([2 / 3, 1.0, 1 / 4])
    complete = loaded.groups[1]
    assert complete.status == f"2/3 seeds; 1 failed: {ERROR_LINE}"
    assert loaded.groups[2].status == "1/2 seeds; 1 missing"


def test_study_report(study, tmp_path, capsys):
    assert report_main([str(study)]) == 0
    out = study / "report"
    table = read_table(out / "table.csv")
    assert list(table) == ["cycle", "complete", "star"]

    # mean and min–max (n = 2: no t-interval) of each n = 2 group and every final metric, by hand from the runs'
    # summary.json
    for topology in ("cycle", "complete"):
        finals = [summary_final(study, topology, seed) for seed in (1, 2)]
        row = table[topology]
        assert METRIC in finals[0] and set(finals[0]) == set(finals[1])
        for metric in finals[0]:
            a, b = finals[0][metric], finals[1][metric]
            mean = (a + b) / 2
            assert float(row[f"{metric}_mean"]) == pytest.approx(mean, rel=1e-9, abs=1e-15), metric
            assert float(row[f"{metric}_low"]) == pytest.approx(min(a, b), rel=1e-9, abs=1e-15), metric
            assert float(row[f"{metric}_high"]) == pytest.approx(max(a, b), rel=1e-9, abs=1e-15), metric
            assert (row[f"{metric}_n"], row[f"{metric}_interval"]) == ("2", "min–max"), metric
        assert (row["n_done"], row["n_expected"]) == ("2", str(2 + (topology == "complete")))
    assert float(table["cycle"]["spectral_gap"]) == pytest.approx(2 / 3)
    assert float(table["complete"]["spectral_gap"]) == pytest.approx(1.0)

    # n = 1: the mean is the run's value, no interval; the missing and failed points are in the table
    star = table["star"]
    assert float(star[f"{METRIC}_mean"]) == pytest.approx(summary_final(study, "star", 1)[METRIC], rel=1e-12)
    assert star[f"{METRIC}_low"] == star[f"{METRIC}_high"] == ""
    assert star["status"] == "1/2 seeds; 1 missing"
    assert table["complete"]["status"] == f"2/3 seeds; 1 failed: {ERROR_LINE}"

    report = (out / "report.md").read_text()
    assert report in capsys.readouterr().out  # printed too
    assert f"2/3 seeds; 1 failed: {ERROR_LINE}" in report
    assert "1/2 seeds; 1 missing" in report and " (n=1) |" in report
    assert point_name("star", 2) in report and point_name("complete", 3) in report
    figures = ["spectral_gap.png", "metric_rounds.png", "consensus.png", "bytes.png"]
    for name in figures:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 5000, name
        assert f"]({name})" in report

    # --out elsewhere and --no-plots: the table and the markdown, no figures
    other = tmp_path / "elsewhere"
    assert report_main([str(study), "--out", str(other), "--no-plots"]) == 0
    assert sorted(p.name for p in other.iterdir()) == ["report.md", "table.csv"]
    assert (other / "table.csv").read_text() == (out / "table.csv").read_text()
    assert ".png" not in (other / "report.md").read_text()


def test_cli_run_folders_and_errors(study, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert report_main([str(study / "runs" / point_name("cycle", 1)), "--no-plots"]) == 0
    assert "fedavg" in (tmp_path / "report.md").read_text()
    # a study is reported on its own, and --metric must be one the runs report
    assert report_main([str(study), str(study / "runs" / point_name("cycle", 1))]) == 2
    assert report_main([str(study), "--metric", "no_such_metric", "--no-plots", "--out", str(tmp_path / "r")]) == 2


# ---------------------------------------------------------------------- p and n_eff (SPEC §10) in the report
GAMMA = 0.951
#: Eigenvalues of the Metropolis W of each topology on 4 peers (see test_spectral_gap_closed_forms).
EIGENVALUES = {"cycle": [1, 1 / 3, -1 / 3, 1 / 3], "complete": [1, 0, 0, 0], "star": [1, 3 / 4, 3 / 4, 0]}


def _p_and_n_eff(topology: str) -> tuple[float, float]:
    """p = 1 − (second largest |λ|)² and n_eff = 1/((1 − γ) tr Σ / K), tr Σ = Σ_k λ_k²/(1 − γλ_k²) (W circulant or
    with eigenvectors orthonormal: mean_i Σ_ii = tr Σ / K)."""
    lam = np.array(EIGENVALUES[topology], dtype=float)
    second = np.sort(np.abs(lam))[::-1][1]
    trace = float((lam ** 2 / (1 - GAMMA * lam ** 2)).sum())
    return 1 - second ** 2, 1 / ((1 - GAMMA) * trace / len(lam))


def test_study_table_has_p_and_n_eff(study, tmp_path):
    out = tmp_path / "report"
    assert report_main([str(study), "--out", str(out)]) == 0
    table = read_table(out / "table.csv")
    for topology in ("cycle", "complete", "star"):
        p, neff = _p_and_n_eff(topology)
        assert float(table[topology]["p"]) == pytest.approx(p, rel=1e-9)
        assert float(table[topology]["n_eff"]) == pytest.approx(neff, rel=1e-9)
    assert float(table["complete"]["n_eff"]) == pytest.approx(4.0)
    report = (out / "report.md").read_text()
    assert "| " + " | ".join(label.replace("|", "\\|") for label in MEASURES.values()) + " |" in report
    assert f"| {_p_and_n_eff('star')[0]:.4g} |" in report
    data = (out / "measures.png").read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 10000
    assert "](measures.png)" in report


def test_old_manifests_get_p_and_n_eff_from_their_mixing(study, tmp_path):
    """A study whose manifests predate p, n_eff and stats["mixing"]: the measures come from the stored mixing
    matrix."""
    import shutil
    old = tmp_path / "old"
    shutil.copytree(study, old, ignore=shutil.ignore_patterns("report"))
    for manifest in (old / "runs").glob("*/manifest.json"):
        data = json.loads(manifest.read_text())
        for key in ("p", "p_worst", "p_source", "n_eff", "n_eff_gamma", "mixing"):
            del data["topology"]["stats"][key]
        manifest.write_text(json.dumps(data))
    loaded = load_study(old)
    for group in loaded.groups:
        p, neff = _p_and_n_eff(group.axes["topology"])
        assert group.measure("p") == pytest.approx(p, rel=1e-9)
        assert group.measure("n_eff") == pytest.approx(neff, rel=1e-9)


def test_bytes_figure_x_is_the_mean_over_seeds_of_the_cumulative_bytes_per_peer(study):
    """Each group's line: x the seeds' mean of Σ bytes_sent / active peers up to each evaluated round (read from
    metrics.jsonl here), y the seeds' mean metric; the band named once in the legend."""
    from analysis.study_plots import bytes_figure, spread_words

    fig = bytes_figure(load_study(study), METRIC)
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    for topology in ("cycle", "complete"):
        sent: dict[int, list[float]] = {}
        acc: dict[int, list[float]] = {}
        for seed in (1, 2):
            records = [json.loads(line) for line in
                       (study / "runs" / point_name(topology, seed) / "metrics.jsonl").read_text().splitlines()]
            total, cumulative = 0.0, {}
            for r in records:
                if r["type"] == "round" and r["round"] > 0:
                    total += r["bytes_sent"] / len(r["active"])
                    cumulative[r["round"]] = total
            for r in records:
                if r["type"] == "eval":
                    sent.setdefault(r["round"], []).append(cumulative[r["round"]])
                    acc.setdefault(r["round"], []).append(r["metrics"][METRIC])
        (label,) = [k for k in lines if topology in k]
        rounds = sorted(sent)
        assert list(lines[label].get_xdata()) == pytest.approx([np.mean(sent[t]) for t in rounds])
        assert list(lines[label].get_ydata()) == pytest.approx([np.mean(acc[t]) for t in rounds])
    key = f"shaded: {spread_words(load_study(study))}"
    assert key.startswith("shaded: min–max over seeds: n\u00a0=\u00a0")  # at most 2 seeds: no t-interval, said so
    assert [t.get_text() for t in ax.get_legend().get_texts()].count(key) == 1
    assert ax.get_xlabel().startswith("data sent per peer (")
    assert ax.get_ylabel() == "test accuracy, network average (fraction correct)"


@pytest.mark.parametrize("key, label", [
    ("test_acc_avg", "test accuracy, network average"),
    ("knn_acc_peer_mean", "kNN accuracy, peers' mean"),
    ("probe_acc_peer_min", "linear-probe accuracy, lowest peer"),
    ("drift_to_avg_peer_max", "distance to the average, highest peer"),
    ("knn_acc_untrained", "kNN accuracy, untrained model"),
    ("distance_to_mean_peer_mean", "distance to the peers' mean, peers' mean"),
    ("consensus_distance", "consensus distance"),  # a label, no role
    ("loss_mean", "training loss"),  # a round record's key with a label of its own, not split
    ("my_metric", "my_metric"),  # no label, no role: the key as written
    ("my_metric_avg", "my_metric, network average"),
])
def test_study_axes_name_metric_and_model(key, label):
    from analysis.metric_plots import metric_label

    assert metric_label(key) == label


def test_arms_that_set_the_topology_get_markers_side_by_side(study, tmp_path):
    """A study whose topology comes from another axis's options (a `scheme` axis, as in the optimisers study):
    that axis is found as the topology-setting one; each arm is one mark (its marker) at its measure, y its
    seeds' mean; arms at one measure value sit DODGE_PT points apart around the true x; the key names both."""
    from analysis.study_plots import DODGE_PT, _against, topology_axes
    from analysis.style import new_figure

    scheme = {("cycle", 1): "x-ring", ("cycle", 2): "y-ring", ("complete", 1): "complete-arm",
              ("complete", 2): "complete-arm", ("star", 1): "star-arm"}
    root = tmp_path / "by-scheme"
    root.mkdir()
    (root / "runs").symlink_to(study / "runs")
    entries = [{"name": point_name(t, s), "options": {},
                "axes": {"scheme": arm, "data": "synthetic", "seed": str(s)}} for (t, s), arm in scheme.items()]
    (root / "plan.json").write_text(json.dumps({"name": "arms", "axes": ["scheme", "data", "seed"],
                                                "points": entries}))
    assert topology_axes(load_study(study)) == ["topology"]
    arms = load_study(root)
    assert topology_axes(arms) == ["scheme"]

    fig = new_figure(6, 4)
    ax = fig.add_subplot(1, 1, 1)
    assert _against(ax, arms, METRIC, "spectral_gap")
    fig.canvas.draw()
    marks = {}
    for container in ax.containers:
        line = container.lines[0]
        (x,), (y,) = line.get_xdata(), line.get_ydata()
        marks[line.get_marker()] = (x, y, line.get_transform().transform((x, y))[0], ax.transData.transform((x, y))[0])
    assert len(marks) == 4  # one marker shape per arm
    by_arm = {}
    for (t, s), arm in scheme.items():
        by_arm.setdefault(arm, []).append(summary_final(study, t, s)[METRIC])
    gaps = {g.axes["scheme"]: g.measure("spectral_gap") for g in arms.groups}
    for arm, values in by_arm.items():
        assert any(x == gaps[arm] and y == pytest.approx(np.mean(values)) for x, y, _, _ in marks.values()), arm
    ring = sorted((shown, true) for x, _, shown, true in marks.values() if x == gaps["x-ring"])
    assert len(ring) == 2
    assert ring[1][0] - ring[0][0] == pytest.approx(DODGE_PT * fig.dpi / 72)
    assert ring[0][0] + ring[1][0] == pytest.approx(2 * ring[0][1])  # side by side around the true x
    lone = [(shown, true) for x, _, shown, true in marks.values() if x != gaps["x-ring"]]
    assert all(shown == pytest.approx(true) for shown, true in lone)
    low, high = ax.get_ylim()
    for group in arms.groups:  # every error bar inside the panel
        iv = group.interval(METRIC)
        assert low <= iv.mean - (iv.half_width or 0.0) and iv.mean + (iv.half_width or 0.0) <= high
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["data=synthetic", "x-ring", "y-ring", "complete-arm", "star-arm"]
