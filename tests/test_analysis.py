"""Tests of analysis/: reading run folders, plots, the report table and FedMuscle's Δ%.

Run folders are written in tmp_path by the run's own writer (RunFolder) with records built by p2pfl.records.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable, Collection
from pathlib import Path

import numpy as np
import pytest
from matplotlib.collections import PolyCollection

import topologies
from analysis import Run, RunFolderError, delta_percent, load_run, lower_is_better, plot_run
from analysis.metric_panels import BYTES, LOSS_PANEL, is_bookkeeping
from analysis.metric_plots import figure_axes
from analysis.plots import (
    consensus_shares,
    metric_panels,
    metrics_figure,
    second_eigenvalue,
    split_metric_name,
)
from analysis.report import build_report, runs_table
from p2pfl.config import make_config
from p2pfl.fedmuscle.records import PeerSpecEntry
from p2pfl.records import (
    BaseManifest,
    DataPartition,
    Host,
    Seeds,
    eval_record,
    round_record,
    round_start,
    summarise_eval,
    summarise_round,
    summary_record,
)
from p2pfl.runtime.runfolder import RunFolder
from topologies import mixing_of

REPO = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# ----- building run folders -------------------------------------------------------------------------------------
def spec_entries(models: list[str], tasks: list[str]) -> list[PeerSpecEntry]:
    """manifest["peers_spec"] of one peer per (model, task)."""
    return [PeerSpecEntry(peer=i, model=m, task=t, dataset="synthetic", group=i, task_group=i, labels=None,
                          metric="accuracy") for i, (m, t) in enumerate(zip(models, tasks))]


def make_run(root: Path, name: str, *, algorithm: str = "dec-ssl", topology: str = "star",
             mixing: str = "metropolis", k: int = 4, rounds: int = 5, acc: list[float] | None = None,
             per_peer: dict | None = None, peers_spec: list | None = None,
             bytes_per_peer: int | Callable[[int, int], int] = 1024,
             summary: bool = True, partition: bool = True, manifest: bool = True, loss: bool = True,
             consensus: bool = True, evals: bool = True, eval_metrics: Callable[[int], dict] | None = None,
             eval_rounds: Collection[int] | None = None, per_peer_at: Callable[[int], dict] | None = None,
             peer_records: int = 0) -> Path:
    """A run folder written by RunFolder: config.yaml, manifest.json, metrics.jsonl (and summary.json).

    ``eval_metrics(t)`` gives the eval record's network metrics at round t (default accuracy and linear_probe);
    ``eval_rounds`` the rounds that have an eval record (default every round). Only the last evaluation has
    per-peer metrics, as with the learners: ``per_peer`` (default a test_acc per peer), unless ``per_peer_at(t)``
    gives every evaluation's. ``bytes_per_peer(t, i)``: what peer i sends in round t. ``peer_records``: the
    records are written as under --peer-records (summarised above that many peers).
    """
    cfg = make_config(algorithm=algorithm, topology=topology, mixing=mixing, peers=k, rounds=rounds,
                      partition="dirichlet", alpha=0.5, seed=0, out=str(root), name=name)
    path = root / name
    folder = RunFolder(path, cfg)
    if manifest:
        graph = topologies.build(topology, k)
        folder.update_manifest(**BaseManifest(
            command=["p2pfl.run"], world_size=1, config=cfg.to_dict(), versions={"python": "3"}, git_commit=None,
            seeds=Seeds(seed=0, streams="test"), hosts=[Host(rank=0, host="h", device="cpu", peers=list(range(k)))],
            topology=topologies.describe(graph, topologies.mixing_matrix(graph, mixing))))
    if manifest and partition:
        counts = [[10 * (i + 1) + c for c in range(3)] for i in range(k)]
        folder.update_manifest(partition=DataPartition(
            kind="dirichlet", alpha=0.5, beta=0.5, sizes=[sum(c) for c in counts], class_counts=counts,
            classes=["a", "b", "c"], rotation_groups=[0] * k))
    if manifest and peers_spec is not None:
        folder.update_manifest(peers_spec=peers_spec)
    acc = acc if acc is not None else [0.1 * (t + 1) for t in range(rounds)]

    def distance(t: int) -> float | None:
        return 0.5 * (1.0 - 1.0 / k) ** (2 * t) if consensus else None

    def sends(t: int, i: int) -> int:
        return bytes_per_peer(t, i) if callable(bytes_per_peer) else bytes_per_peer

    folder.log(round_start(distance(0)))
    last = None
    for t in range(1, rounds + 1):
        folder.log(summarise_round(round_record(
            t, 2.0 * t, range(k), {i: {"loss": 1.0 / t + 0.01 * i} for i in range(k)} if loss else {}, distance(t),
            {i: sends(t, i) for i in range(k)}, {i: sends(t, i) for i in range(k)}, time_compute_s=1.0,
            time_comm_s=0.5, time_wait_s=0.1, time_local_s=0.9, round_s=2.0, time_schedule_s=0.001,
            network={"links": 2 * k, "digest": "00000000", "crashed": [], "rejoining": [], "straggling": [],
                     "degree": {str(i): 2 for i in range(k)}, "sigma2": 1.0 - 1.0 / k}), k, peer_records))
        if evals and (eval_rounds is None or t in eval_rounds):
            final = t == rounds
            pp = per_peer_at(t) if per_peer_at is not None else {} if not final else per_peer if per_peer is not None \
                else {str(i): {"test_acc": acc[t - 1] + 0.01 * i} for i in range(k)}
            last = eval_record(t, final, eval_metrics(t) if eval_metrics is not None else
                               {"accuracy": acc[t - 1], "linear_probe": acc[t - 1] / 2}, pp)
            folder.log(summarise_eval(last, peer_records))
    if summary:
        counters = {"wire_sent": {}, "wire_recv": {}, "peer_sent": {i: sum(sends(t, i) for t in range(1, rounds + 1))
                                                                  for i in range(k)},
                    "peer_recv": {i: sum(sends(t, i) for t in range(1, rounds + 1)) for i in range(k)},
                    "time_comm_s": 0.5 * rounds,
                    "time_wait_s": 0.1 * rounds}
        folder.write_summary(summary_record(
            algorithm=algorithm, topology=topology, peers=k, rounds=rounds, ranks=1, wall_s=2.0 * rounds + 1.5,
            run_dir=str(path), final=last["metrics"] if last else {}, consensus_distance_initial=distance(0),
            comm_per_rank=[counters], extra={},
            network={"kind": "static", "links_per_round": 2.0 * k, "topology_links_per_round": 2.0 * k, "crashed": []}))
    folder.close()
    return path


def table_rows(markdown: str, first_header: str = "run") -> list[list[str]]:
    """The body rows of the first markdown table whose first header cell is ``first_header``."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return [lines[start].strip().strip("|").split("|")] + rows


# ----- load_run ---------------------------------------------------------------------------------------------------
def test_load_run_reads_every_file(tmp_path):
    path = make_run(tmp_path, "r1", rounds=3)
    run = load_run(path)
    assert isinstance(run, Run) and run.path == path and run.name == "r1"
    assert run.config["peers"] == 4 and run.config["alpha"] == 0.5
    assert len(run.manifest["topology"]["edges"]) == 3
    assert [r["round"] for r in run.rounds] == [0, 1, 2, 3]
    assert [r["round"] for r in run.evals] == [1, 2, 3]
    assert run.summary["wall_s"] == 7.5
    assert run.algorithm == "dec-ssl" and run.topology_name == "star" and run.num_peers == 4
    assert run.partition_label == "dirichlet(alpha=0.5)"
    # the final evaluation: the network metrics and the statistics of the peers' test_acc = 0.3 + 0.01 i
    assert run.final_metrics() == pytest.approx({"accuracy": 0.3, "linear_probe": 0.15, "test_acc_peer_mean": 0.315,
                                                 "test_acc_peer_min": 0.3, "test_acc_peer_max": 0.33})
    assert run.bytes_sent_per_peer_round() == pytest.approx(1024.0)
    assert run.wall_time_s() == pytest.approx(7.5)


def test_load_run_in_progress_skips_truncated_last_line(tmp_path):
    path = make_run(tmp_path, "r", rounds=3, summary=False)
    with open(path / "metrics.jsonl", "a") as fh:
        fh.write('{"type": "round", "round": 4, "elapsed_s": 8.0, "consensus_dis')  # cut off mid-write
    run = load_run(path)
    assert run.summary is None
    assert [r["round"] for r in run.rounds] == [0, 1, 2, 3]
    assert run.rounds_done == 3 and run.planned_rounds == 3
    # without a summary the wall time is the last round's time since start
    assert run.wall_time_s() == pytest.approx(6.0)


def test_load_run_rejects_corruption_before_the_last_line_and_non_runs(tmp_path):
    path = make_run(tmp_path, "r", rounds=3)
    lines = (path / "metrics.jsonl").read_text().splitlines()
    lines[1] = lines[1][:10]
    (path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(RunFolderError, match=r"metrics.jsonl:2"):
        load_run(path)
    with pytest.raises(ValueError):
        load_run(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="not a run folder"):
        load_run(tmp_path / "empty")


# ----- plots --------------------------------------------------------------------------------------------------------
def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, path
    assert len(data) > 2000, (path, len(data))


def test_plot_run_writes_every_plot_as_png(tmp_path):
    spec = spec_entries([f"m{i}" for i in range(4)], ["cls"] * 4)
    path = make_run(tmp_path, "r", rounds=6, peers_spec=spec)
    written = plot_run(load_run(path))
    names = {p.name for p in written}
    assert names == {"metrics.png", "metrics_bytes.png", "consensus.png", "topology.png", "partition.png",
                     "per_peer.png"}  # no per_peer_degree.png: on a cycle every peer has degree 2
    for p in written:
        assert p.parent == path / "plots"
        assert_png(p)
    # plotting again replaces the files and leaves no temporary files behind
    again = plot_run(path, out_dir=tmp_path / "elsewhere")
    assert {p.name for p in again} == names
    assert sorted(p.name for p in (path / "plots").iterdir()) == sorted(names)


def test_plot_run_skips_missing_data(tmp_path):
    path = make_run(tmp_path, "r", rounds=3, manifest=False, consensus=False, evals=False, summary=False)
    written = plot_run(load_run(path))
    assert [p.name for p in written] == ["metrics.png", "metrics_bytes.png"]  # only the training loss is there
    assert_png(written[0])
    # a method without a loss, a consensus distance or a data partition (FedMuscle records none of these)
    path = make_run(tmp_path, "m", rounds=3, loss=False, consensus=False, partition=False)
    assert sorted(p.name for p in plot_run(load_run(path))) == ["metrics.png", "metrics_bytes.png", "per_peer.png",
                                                                "topology.png"]
    # a run that has just started: config.yaml and an empty metrics.jsonl
    RunFolder(tmp_path / "bare", make_config(algorithm="dec-ssl", peers=4)).close()
    assert plot_run(load_run(tmp_path / "bare")) == []


def test_spectral_prediction_multiplies_the_recorded_sigma2_squared(tmp_path):
    """The synthetic run shrinks its consensus distance by exactly sigma2² = (1 - 1/K)² a round."""
    run = load_run(make_run(tmp_path, "r", rounds=6))
    xs, ys = run.spectral_prediction()
    assert xs == [float(t) for t in range(7)]
    measured = run.series("consensus_distance")[1]
    np.testing.assert_allclose(ys, measured, rtol=1e-12)
    assert run.mean_degree() == {str(i): 2.0 for i in range(4)}


UNTRAINED_PROBE, UNTRAINED_KNN = 0.31, 0.27


def grouped_metrics(t: int) -> dict:
    """Eval metrics in the ``<name>_avg`` / ``<name>_peer_{mean,min,max}`` / ``<name>_untrained`` pattern, with
    bookkeeping keys, known values at round t."""
    return {"probe_acc_avg": 0.5 + 0.01 * t, "knn_acc_avg": 0.4 + 0.01 * t,
            "probe_acc_peer_mean": 0.45 + 0.01 * t, "probe_acc_peer_min": 0.40 + 0.01 * t,
            "probe_acc_peer_max": 0.50 + 0.01 * t, "probe_acc_untrained": UNTRAINED_PROBE,
            "knn_acc_untrained": UNTRAINED_KNN, "peers_scored": 4.0, "best_cluster": 1.0, "messages_count": 12.0,
            "drift_to_avg_peer_mean": 2.0 / t, "drift_to_avg_peer_min": 1.0 / t, "drift_to_avg_peer_max": 3.0 / t}


def records(path: Path, kind: str) -> list[dict]:
    """The metrics.jsonl records of one type, read with json alone (an expectation independent of analysis)."""
    lines = (path / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["type"] == kind]


def band_by_x(ax) -> dict[float, tuple[float, float]]:
    """x -> (lowest, highest) y of the panel's one shaded band (fill_between), read from its polygon."""
    (band,) = [c for c in ax.collections if isinstance(c, PolyCollection)]
    out: dict[float, list[float]] = {}
    for x, y in band.get_paths()[0].vertices:
        out.setdefault(round(float(x), 9), []).append(float(y))
    return {x: (min(ys), max(ys)) for x, ys in out.items()}


def labelled(ax, prefix: str):
    """The panel's one line whose legend label starts with ``prefix``."""
    (line,) = [ln for ln in ax.get_lines() if ln.get_label().startswith(prefix)]
    return line


def test_split_metric_name():
    assert split_metric_name("probe_acc_avg") == ("probe_acc", "avg")
    assert split_metric_name("probe_acc_peer_min") == ("probe_acc", "peer_min")
    assert split_metric_name("drift_to_avg_peer_mean") == ("drift_to_avg", "peer_mean")
    assert split_metric_name("knn_acc_untrained") == ("knn_acc", "untrained")
    assert split_metric_name("accuracy") == ("accuracy", "value")
    assert split_metric_name("_avg") == ("_avg", "value")
    assert [is_bookkeeping(k) for k in ("peers_scored", "best_cluster", "messages_count", "probe_acc_avg")] == \
        [True, True, True, False]


def test_metric_panels_group_avg_peer_statistics_and_untrained(tmp_path):
    rounds = 5
    run = load_run(make_run(tmp_path, "r", rounds=rounds, eval_metrics=grouped_metrics, per_peer={}))
    panels = metric_panels(run)
    # bookkeeping keys have no panel, the untrained values are their metric's reference, not panels
    assert [p.name for p in panels] == ["probe_acc", "knn_acc", "drift_to_avg", LOSS_PANEL]
    probe, knn, drift, loss = panels
    assert (probe.reference, knn.reference, drift.reference) == (UNTRAINED_PROBE, UNTRAINED_KNN, None)
    assert set(probe.series) == {"avg", "peer_mean", "peer_min", "peer_max"}
    assert set(knn.series) == {"avg"}
    assert set(drift.series) == {"peer_mean", "peer_min", "peer_max"}
    ts = [float(t) for t in range(1, rounds + 1)]
    for panel in panels[:3]:
        for role, (xs, ys) in panel.series.items():
            assert xs == ts
            assert ys == pytest.approx([grouped_metrics(int(t))[panel.name + "_" + role] for t in ts])
    assert loss.series["value"][1] == pytest.approx([1.0 / t + 0.015 for t in ts])  # mean of 1/t + 0.01 i, i < 4
    # plain names keep a panel each; the statistics of the final per-peer test_acc form a group
    plain = metric_panels(load_run(make_run(tmp_path, "p", rounds=3)))
    assert [p.name for p in plain] == ["accuracy", "linear_probe", "test_acc", LOSS_PANEL]
    assert [set(p.series) for p in plain] == [{"value"}, {"value"}, {"peer_mean", "peer_min", "peer_max"}, {"value"}]
    assert plain[2].once and not plain[0].once


def test_metrics_figure_leaves_out_bookkeeping_and_draws_the_untrained_reference(tmp_path):
    rounds = 5
    run = load_run(make_run(tmp_path, "r", rounds=rounds, eval_metrics=grouped_metrics, per_peer={}))
    fig = metrics_figure(run)
    axes = figure_axes(fig)
    assert set(axes) == {"probe_acc", "knn_acc", "drift_to_avg", LOSS_PANEL}
    drawn = {line.get_label() for ax in fig.axes for line in ax.get_lines()} | {ax.get_title() for ax in fig.axes}
    assert not any(key in text for text in drawn for key in ("peers_scored", "best_cluster", "messages_count",
                                                              "untrained)"))
    for name, value in (("probe_acc", UNTRAINED_PROBE), ("knn_acc", UNTRAINED_KNN)):
        ref = labelled(axes[name], "untrained model")
        assert ref.get_linestyle() == "--"
        assert list(ref.get_ydata()) == [value, value]
        assert f"{value:.4g}" in ref.get_label()
        left, right = axes[name].get_ylim()
        assert left < value < right  # in view, not only in the data
    assert not any(ln.get_label().startswith("untrained") for ax in (axes["drift_to_avg"], axes[LOSS_PANEL])
                   for ln in ax.get_lines())
    # the network average on top of the band and the references
    probe = axes["probe_acc"]
    avg = labelled(probe, "network average")
    assert avg.get_zorder() > max(c.get_zorder() for c in probe.collections)
    assert avg.get_zorder() > labelled(probe, "untrained model").get_zorder()
    for ax in fig.axes:  # shared x-range from 0 to the last round
        left, right = ax.get_xlim()
        assert left <= 0 and rounds <= right < rounds + 1
    assert_png(plot_run(run, out_dir=tmp_path / "plots")[0])


def peer_scores(t: int) -> dict:
    """Every evaluation's per-peer test_acc, scattered differently each round (not monotone in the peer)."""
    return {str(i): {"test_acc": 0.3 + 0.05 * t + 0.02 * ((3 * i + t) % 5)} for i in range(5)}


def test_band_spans_the_peers_min_and_max_of_the_records(tmp_path):
    path = make_run(tmp_path, "r", k=5, rounds=4, per_peer_at=peer_scores,
                    eval_metrics=lambda t: {"test_acc_avg": 0.4 + 0.05 * t})
    axes = figure_axes(metrics_figure(load_run(path)))
    for name, kind, values in (("test_acc", "eval", lambda r: [m["test_acc"] for m in r["per_peer"].values()]),
                               (LOSS_PANEL, "round", lambda r: list(r.get("loss", {}).values()))):
        expected = {float(r["round"]): (min(values(r)), max(values(r))) for r in records(path, kind) if values(r)}
        band = band_by_x(axes[name])
        assert band.keys() == expected.keys()
        for x, (lo, hi) in expected.items():
            assert band[x] == pytest.approx((lo, hi))
    assert "min–max" in str([t.get_text() for t in axes["test_acc"].get_legend().get_texts()])


def test_metric_once_is_a_strip_with_average_and_reference(tmp_path):
    rounds = 6
    scores = {str(i): {"probe_acc": 0.40 + 0.01 * ((2 * i) % 7)} for i in range(7)}
    path = make_run(tmp_path, "r", k=7, rounds=rounds, eval_rounds={rounds}, per_peer=scores,
                    eval_metrics=lambda t: {"probe_acc_avg": 0.47, "probe_acc_untrained": 0.2})
    fig = metrics_figure(load_run(path))
    ax = figure_axes(fig)["probe_acc"]
    (final,) = records(path, "eval")
    per_peer = sorted(m["probe_acc"] for m in final["per_peer"].values())
    (strip,) = [c for c in ax.collections if c.get_label().startswith("peers (n=7)")]
    assert sorted(strip.get_offsets()[:, 1]) == pytest.approx(per_peer)
    assert np.ptp(strip.get_offsets()[:, 0]) > 0  # spread sideways, not one stack of dots
    assert not any(isinstance(c, PolyCollection) for c in ax.collections)  # no band of zero width
    assert list(labelled(ax, "network average").get_ydata()) == [0.47, 0.47]
    ref = labelled(ax, "untrained model")
    assert ref.get_linestyle() == "--" and list(ref.get_ydata()) == [0.2, 0.2]
    ylo, yhi = ax.get_ylim()
    assert ylo < 0.2 and max(per_peer) < 0.47 < yhi
    assert f"round {rounds}" in ax.get_xlabel()
    assert_png(plot_run(load_run(path), out_dir=tmp_path / "plots")[0])


def test_metrics_against_bytes_use_the_cumulative_bytes_per_peer(tmp_path):
    path = make_run(tmp_path, "r", k=4, rounds=5, bytes_per_peer=lambda t, i: 1000 * t * (i + 1),
                    eval_metrics=lambda t: {"knn_acc_avg": 0.1 * t, "knn_acc_untrained": 0.05})
    run = load_run(path)
    fig = metrics_figure(run, BYTES)
    total, sent = 0.0, {}
    for r in records(path, "round")[1:]:
        total += r["bytes_sent"] / len(r["active"])
        sent[r["round"]] = total
    assert sent[1] == 2500.0  # (1 + 2 + 3 + 4) * 1000 / 4
    axes = figure_axes(fig)
    avg = labelled(axes["knn_acc"], "network average")
    assert list(avg.get_xdata()) == pytest.approx([sent[r["round"]] for r in records(path, "eval")])
    assert list(labelled(axes[LOSS_PANEL], "peers: mean").get_xdata()) == pytest.approx(list(sent.values()))
    assert sorted(band_by_x(axes[LOSS_PANEL])) == pytest.approx(sorted(sent.values()))
    assert axes["knn_acc"].get_xlabel() == "data sent per peer (KiB)"
    assert {p.name for p in plot_run(run, out_dir=tmp_path / "plots")} >= {"metrics.png", "metrics_bytes.png"}
    # a run that sent nothing has no such figure
    assert metrics_figure(load_run(make_run(tmp_path, "silent", rounds=2, bytes_per_peer=0)), BYTES) is None


def test_large_summarised_run_plots_from_the_statistics(tmp_path):
    k, rounds = 320, 3
    path = make_run(tmp_path, "big", k=k, rounds=rounds, peer_records=10, topology="cycle",
                    per_peer={str(i): {"test_acc": 0.2 + (i % 17) / 100} for i in range(k)})
    run = load_run(path)
    assert run.summarised and run.final_per_peer() is None
    written = {p.name for p in plot_run(run, out_dir=tmp_path / "plots")}
    assert {"metrics.png", "metrics_bytes.png", "topology.png"} <= written
    axes = figure_axes(metrics_figure(run))
    expected = {float(r["round"]): (r["loss_stats"]["min"], r["loss_stats"]["max"]) for r in records(path, "round")
                if "loss_stats" in r}
    band = band_by_x(axes[LOSS_PANEL])
    assert band.keys() == expected.keys()
    for x, pair in expected.items():
        assert band[x] == pytest.approx(pair)
    stats = records(path, "eval")[-1]["per_peer_stats"]["test_acc"]
    (bar,) = axes["test_acc"].containers  # the once-evaluated metric of K peers: mean and min–max
    (segment,) = bar.lines[2][0].get_segments()
    assert sorted(segment[:, 1]) == pytest.approx([stats["min"], stats["max"]])
    assert bar.get_label().startswith(f"peers (n={k})")


def test_lambda2_and_consensus_shares_are_what_the_manifest_records(tmp_path):
    # Metropolis weights on a 6-cycle are 1/3 everywhere: eigenvalues 1/3 + 2/3 cos(2 pi k / 6), |lambda2| = 2/3.
    run = load_run(make_run(tmp_path, "cycle", topology="cycle", k=6))
    w = mixing_of(run.topology)
    ring = np.abs(np.subtract.outer(range(6), range(6)))
    assert w == pytest.approx(np.where(np.isin(ring, [0, 1, 5]), 1 / 3, 0.0))
    assert second_eigenvalue(run) == pytest.approx(2 / 3)
    assert consensus_shares(run) == pytest.approx(np.full(6, 1 / 6))
    # Uniform weights on a 20-peer star: the left Perron vector is proportional to deg + 1,
    # so the hub holds 20 / (20 + 19 * 2) of the consensus (about 34%, SPEC §1).
    run = load_run(make_run(tmp_path, "star", mixing="uniform", k=20))
    shares = consensus_shares(run)
    assert shares[0] == pytest.approx(20 / 58) and shares[1:] == pytest.approx(np.full(19, 2 / 58))
    # analysis reports the manifest's record (topologies.stats), it does not compute its own
    run.manifest["topology"]["stats"].update(lambda2=0.25, consensus_share=[1.0] + [0.0] * 19)
    assert second_eigenvalue(run) == 0.25 and list(consensus_shares(run)) == [1.0] + [0.0] * 19
    assert second_eigenvalue(Run(path=tmp_path)) is None and consensus_shares(Run(path=tmp_path)) is None


# ----- the report table ---------------------------------------------------------------------------------------------
def test_runs_table_has_one_row_per_run_with_final_values(tmp_path):
    a = load_run(make_run(tmp_path, "a", rounds=4, acc=[0.1, 0.2, 0.3, 0.42], bytes_per_peer=2048))
    b = load_run(make_run(tmp_path, "b", algorithm="moon", rounds=2, acc=[0.5, 0.61], summary=False))
    rows = table_rows(runs_table([a, b]))
    header, body = [h.strip() for h in rows[0]], rows[1:]
    assert len(body) == 2
    col = {name: i for i, name in enumerate(header)}
    for name in ("run", "algorithm", "topology", "peers", "partition", "rounds", "accuracy", "linear_probe",
                 "bytes sent/peer/round", "wall time (s)"):
        assert name in col
    ra, rb = body
    assert ra[col["run"]] == "a" and rb[col["run"]] == "b"
    assert ra[col["algorithm"]] == "dec-ssl" and rb[col["algorithm"]] == "moon"
    assert ra[col["peers"]] == "4" and ra[col["topology"]] == "star"
    assert ra[col["rounds"]] == "4" and rb[col["rounds"]] == "2"
    assert float(ra[col["accuracy"]]) == pytest.approx(0.42)
    assert float(rb[col["accuracy"]]) == pytest.approx(0.61)
    assert float(ra[col["linear_probe"]]) == pytest.approx(0.21)
    assert ra[col["bytes sent/peer/round"]] == "2.0 KiB"
    assert float(ra[col["wall time (s)"]]) == pytest.approx(9.5)   # summary
    assert float(rb[col["wall time (s)"]]) == pytest.approx(4.0)   # last elapsed_s


# ----- Δ% -----------------------------------------------------------------------------------------------------------
def test_delta_percent_hand_computed():
    d = delta_percent({0: 0.8, 1: 0.5}, {0: 0.5, 1: 0.4})
    assert d.per_peer == pytest.approx({"0": 60.0, "1": 25.0})
    assert d.mean == pytest.approx(42.5)
    # sequences are indexed by peer
    assert delta_percent([0.8, 0.5], [0.5, 0.4]).mean == pytest.approx(42.5)
    # lower is better: a loss falling from 0.4 to 0.3 is a 25% improvement
    d = delta_percent({"0": 0.3}, {"0": 0.4}, lower_is_better=True)
    assert d.per_peer["0"] == pytest.approx(25.0)
    # per-peer flags: peer 0 accuracy 0.6 -> 0.66 (+10), peer 1 loss 2.0 -> 2.5 (-25)
    d = delta_percent({"0": 0.66, "1": 2.5}, {"0": 0.6, "1": 2.0}, lower_is_better={"0": False, "1": True})
    assert d.per_peer == pytest.approx({"0": 10.0, "1": -25.0})
    assert d.mean == pytest.approx(-7.5)
    # undefined ratio, mismatched peers
    assert math.isnan(delta_percent({"0": 1.0}, {"0": 0.0}).per_peer["0"])
    with pytest.raises(ValueError, match="same peers"):
        delta_percent({"0": 1.0, "1": 1.0}, {"0": 1.0})


def test_lower_is_better_names():
    assert lower_is_better("loss") and lower_is_better("val_loss") and lower_is_better("top1_error")
    assert lower_is_better("Error")
    assert not lower_is_better("accuracy") and not lower_is_better("miou") and not lower_is_better(None)


def fedmuscle_pair(tmp_path: Path) -> tuple[Path, Path]:
    spec = spec_entries(["resnet18", "vit-tiny", "mlp"], ["cifar100", "segmentation", "depth"])
    local_pp = {"0": {"accuracy": 0.40, "task_metric": 0.40, "task_metric_name": "accuracy"},
                "1": {"task_metric": 0.30, "task_metric_name": "miou"},
                "2": {"task_metric": 0.50, "task_metric_name": "depth_error"}}
    muscle_pp = {"0": {"accuracy": 0.50, "task_metric": 0.50, "task_metric_name": "accuracy"},
                 "1": {"task_metric": 0.36, "task_metric_name": "miou"},
                 "2": {"task_metric": 0.45, "task_metric_name": "depth_error"}}
    local = make_run(tmp_path, "local-run", algorithm="local", k=3, rounds=2, per_peer=local_pp, peers_spec=spec)
    muscle = make_run(tmp_path, "muscle-run", algorithm="fedmuscle", k=3, rounds=2, per_peer=muscle_pp,
                      peers_spec=spec)
    return local, muscle


# hand-computed: peer 0 (0.5-0.4)/0.4 = +25%, peer 1 (0.36-0.3)/0.3 = +20%, peer 2 error 0.5 -> 0.45 = +10%
EXPECTED_DELTAS = ["+25.00%", "+20.00%", "+10.00%"]
EXPECTED_MEAN = "+18.33%"


def test_report_delta_table_from_runs(tmp_path):
    local, muscle = fedmuscle_pair(tmp_path)
    text = build_report([load_run(muscle), load_run(local)])
    rows = table_rows(text, first_header="peer")
    body = rows[1:]
    assert [r[0] for r in body] == ["0", "1", "2", "mean"]
    assert [r[1] for r in body[:3]] == ["resnet18", "vit-tiny", "mlp"]
    assert [r[2] for r in body[:3]] == ["cifar100", "segmentation", "depth"]
    assert [r[-1] for r in body] == EXPECTED_DELTAS + [EXPECTED_MEAN]
    assert f"mean Δ = {EXPECTED_MEAN}" in text
    # a local run with other peers is not used as the baseline
    other = make_run(tmp_path, "other-local", algorithm="local", k=5, rounds=2)
    text = build_report([load_run(muscle)], baseline=load_run(other))
    assert "mean Δ" not in text and "peers differ" in text


def test_report_cli(tmp_path):
    local, muscle = fedmuscle_pair(tmp_path)
    gossip = make_run(tmp_path, "gossip-run", rounds=3)
    out = tmp_path / "out" / "report.md"

    def contents(folder: Path) -> dict[str, tuple[int, int]]:
        return {str(f.relative_to(folder)): (f.stat().st_size, f.stat().st_mtime_ns) for f in folder.rglob("*")}

    before = {run: contents(run) for run in (muscle, gossip, local)}
    proc = subprocess.run([sys.executable, "-m", "analysis.report", str(muscle), str(gossip), "--out", str(out),
                           "--baseline", str(local), "--plot-format", "png,pdf"], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert text.strip() == proc.stdout.strip()
    runs = table_rows(text)[1:]
    assert [r[0] for r in runs] == ["muscle-run", "gossip-run", "local-run"]
    assert f"mean Δ = {EXPECTED_MEAN}" in text
    for run in (muscle, gossip, local):  # the plots beside the report, in both formats; the runs untouched
        assert contents(run) == before[run]
        for name in ("metrics", "per_peer"):
            assert_png(out.parent / "report-plots" / run.name / f"{name}.png")
            assert (out.parent / "report-plots" / run.name / f"{name}.pdf").read_bytes().startswith(b"%PDF-")
        assert f"(report-plots/{run.name}/metrics.png) ([pdf](report-plots/{run.name}/metrics.pdf))" in text
    # a bad format is one line before anything is drawn
    proc = subprocess.run([sys.executable, "-m", "analysis.report", str(gossip), "--out", str(tmp_path / "x.md"),
                           "--plot-format", "png,jpeg"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.strip() == ("analysis.report: --plot-format: unknown format 'jpeg'; "
                                                            "allowed: png, pdf, svg (comma-separated)")
    assert not (tmp_path / "x.md").exists() and not (tmp_path / "x-plots").exists()
    # default --out is report.md in the working directory; a bad folder is a clean error
    proc = subprocess.run([sys.executable, "-m", "analysis.report", str(gossip), "--no-plots"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "report.md").is_file()
    proc = subprocess.run([sys.executable, "-m", "analysis.report", str(tmp_path / "nope")], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "nope" in proc.stderr
