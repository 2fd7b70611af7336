"""Studies: the plan a study file expands to, and the local runner (skips finished points, reruns failed ones,
resumes preempted ones exactly, reports each failure's error line)."""
from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from p2pfl.study import StudyError, StudyFolder, expand, load_study
from p2pfl.study.__main__ import main as study_main

from conftest import ROOT
from golden_cases import normalise

GRID = {"name": "g", "base": {"algorithm": "consensus", "rounds": 2},
        "axes": {"topology": ["cycle", "star", "complete"],
                 "data": [{"label": "iid", "partition": "iid"}, {"partition": "dirichlet", "alpha": 0.1}],
                 "link-failure": [0.0, 0.3]},
        "seeds": 2}


def test_the_grid_is_every_combination_in_axis_order_with_stable_unique_names() -> None:
    plan = expand(GRID)
    assert plan.axes == ["topology", "data", "link-failure", "seed"]
    assert len(plan.points) == 3 * 2 * 2 * 2
    expected = itertools.product(["cycle", "star", "complete"], ["iid", "partition-dirichlet_alpha-0.1"],
                                 ["0", "0.3"], ["0", "1"])
    assert [tuple(p.axes.values()) for p in plan.points] == list(expected)
    first, last = plan.points[0], plan.points[-1]
    assert first.name == "topology-cycle__data-iid__link-failure-0__seed-0"
    assert first.options == {"algorithm": "consensus", "rounds": 2, "topology": "cycle", "partition": "iid",
                             "link_failure": 0.0, "seed": 0}
    assert last.options["alpha"] == 0.1 and last.options["partition"] == "dirichlet"
    assert len({p.name for p in plan.points}) == len(plan.points)
    assert [p.name for p in expand(GRID).points] == [p.name for p in plan.points]  # stable


def test_listed_points_join_the_grid_and_name_their_own_axes() -> None:
    study = {**GRID, "points": [{"topology": "cycle", "data": "iid", "link-failure": 0.0, "seed": 0},  # in grid
                                {"topology": "binary-tree", "data": "iid", "seed": 5, "rounds": 7}]}
    plan = expand(study)
    assert len(plan.points) == 24 + 1
    extra = plan.points[-1]
    assert extra.name == "topology-binary-tree__data-iid__seed-5__rounds-7"
    assert extra.options["rounds"] == 7 and extra.options["partition"] == "iid"
    only_points = expand({"points": [{"topology": "star"}, {"topology": "cycle", "seed": 1}]})
    assert [p.name for p in only_points.points] == ["topology-star", "topology-cycle__seed-1"]


@pytest.mark.parametrize("study,message", [
    ({"axes": {"topology": "cycle"}}, "axes.topology: must be a non-empty list"),
    ({"axes": {"colour": ["red"]}}, "axes.colour: not a p2pfl.run option"),
    ({"axes": {"data": [{"partition": "iid", "flavour": 1}]}}, "axes.data: unknown option 'flavour'"),
    ({"base": {"roundz": 3}, "axes": {"seed": [0]}}, "base: unknown option 'roundz'"),
    ({"axes": {"seed": [0]}, "extra": 1}, "unknown key 'extra'"),
    ({"points": [{"data": "iid"}], "axes": {"data": [{"label": "x", "partition": "iid"}]}},
     "points[0].data: no value labelled 'iid'"),
    ({}, "the study has no points"),
])
def test_a_bad_study_file_is_one_line_naming_the_key(study: dict, message: str, tmp_path: Path, capsys) -> None:
    with pytest.raises(StudyError, match=message.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        expand(study)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    assert study_main([str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("p2pfl.study: error: ") and message in err[0]
    assert not (tmp_path / "out").exists()


CONSENSUS = {"algorithm": "consensus", "vector_size": 50, "rounds": 2, "peers": 4, "eval_every": 0, "plots": False}


def _write(tmp_path: Path, study: dict) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def test_a_local_study_runs_skips_what_is_done_and_reports_a_failure(tmp_path: Path, capsys) -> None:
    study = {"name": "s", "base": CONSENSUS, "axes": {"topology": ["cycle", "complete"]}, "seeds": 2,
             "points": [{"topology": "cycle", "seed": 0, "crash": "1@1,3@1"}]}  # 0 and 2 alone: fails at set-up
    path = _write(tmp_path, study)
    out = tmp_path / "studies"
    assert study_main([str(path), "--out", str(out), "--jobs", "2"]) == 1
    folder = StudyFolder(out / "s")
    states = {s.name: s for s in folder.states([p.name for p in load_study(path)[0].points])}
    bad = "topology-cycle__seed-0__crash-1_1_3_1"
    assert {n: s.state for n, s in states.items()} == {**{n: "done" for n in states if n != bad}, bad: "failed"}
    assert states[bad].error.startswith("p2pfl: error: --crash 1@1,3@1: peer(s) [0, 2] would have no neighbour")
    for name in states:
        if name != bad:
            run = folder.run_dir(name)
            assert (run / "summary.json").is_file() and (run / "manifest.json").is_file()
            assert yaml.safe_load(folder.config(name).read_text())["vector_size"] == 50
    capsys.readouterr()
    assert study_main([str(out / "s"), "--status"]) == 0
    report = capsys.readouterr().out
    assert "done 4  running 0  failed 1  preempted 0  pending 0  (of 5)" in report
    assert f"failed  {bad}: p2pfl: error: --crash" in report
    # fixed in the study file: only the failed point runs again; its first attempt's folder is kept
    study["points"][0]["crash"] = "1@2"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    assert study_main([str(path), "--out", str(out), "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert "1 of 5 points to run" in dry and "topology-cycle__seed-0__crash-1_2" in dry
    assert study_main([str(path), "--out", str(out)]) == 0
    assert "running 1 of 5 points" in capsys.readouterr().out
    assert study_main([str(path), "--out", str(out)]) == 0
    assert "all 5 points done" in capsys.readouterr().out


SLOW = {"algorithm": "fedavg", "peers": 6, "rounds": 6, "topology": "cycle", "dataset": "synthetic",
        "train_subset": 600, "batch_size": 16, "local_steps": 30, "eval_every": 0, "plots": False,
        "batch_peers": "off"}


def _rounds_written(run_dir: Path) -> int:
    path = run_dir / "metrics.jsonl"
    return path.read_text().count('"type": "round"') if path.is_file() else 0


@pytest.mark.mpi
def test_a_preempted_study_resumes_its_points_exactly(tmp_path: Path) -> None:
    """SIGTERM to the study runner in round 2 stops its point at the round's end with a checkpoint (exit 75,
    state preempted); running the study again resumes it, and its metrics equal an uninterrupted run's."""
    path = _write(tmp_path, {"name": "p", "base": SLOW, "axes": {"seed": [3]}})
    out = tmp_path / "studies"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "p2pfl.study", str(path), "--out", str(out), "--ranks-per-run", "2"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    run = out / "p" / "runs" / "seed-3"
    deadline = time.monotonic() + 120
    while _rounds_written(run) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=60)[0]
    assert "seed-3: preempted" in output, output
    folder = StudyFolder(out / "p")
    assert folder.state("seed-3").state == "preempted" and folder.rc("seed-3") == 75
    assert _rounds_written(run) < 7
    resumed = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-2000:]
    assert folder.state("seed-3").state == "done"
    whole = tmp_path / "whole"
    direct = subprocess.run([sys.executable, "-m", "p2pfl.run", "--config", str(folder.config("seed-3")),
                             "--out", str(tmp_path), "--name", "whole", "--no-progress"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert direct.returncode == 0, direct.stderr[-2000:]
    assert normalise(run / "metrics.jsonl") == normalise(whole / "metrics.jsonl")


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("p2pfl.study: error: "), err
    return err[0]


@pytest.mark.parametrize("flags", [[], ["--dry-run"], ["--slurm", "--dry-run"]], ids=["run", "dry-run", "slurm"])
def test_a_bad_point_value_is_refused_before_any_point_runs_or_is_queued(flags: list[str], tmp_path: Path,
                                                                         capsys) -> None:
    study = {"name": "bad", "base": CONSENSUS, "axes": {"topology": ["cycle", "moebius"]}}
    out = tmp_path / "studies"
    assert study_main([str(_write(tmp_path, study)), "--out", str(out), *flags]) == 2
    line = _one_error_line(capsys)
    assert "point topology-moebius: --topology: unknown value 'moebius'" in line
    assert not out.exists()  # nothing ran, nothing was written or queued


def test_an_empty_listed_point_is_refused_and_finished_runs_stay(tmp_path: Path, capsys) -> None:
    study = {"name": "s", "base": CONSENSUS, "axes": {"topology": ["cycle"]}, "points": [{}]}
    with pytest.raises(StudyError, match=r"points\[0\]: an empty point"):
        expand(study)
    finished = tmp_path / "studies" / "s" / "runs" / "topology-cycle"
    finished.mkdir(parents=True)
    (finished / "summary.json").write_text("{}")
    assert study_main([str(_write(tmp_path, study)), "--out", str(tmp_path / "studies")]) == 2
    assert "points[0]: an empty point" in _one_error_line(capsys)
    assert (finished / "summary.json").is_file() and not (tmp_path / "studies" / "s" / "failed").exists()


@pytest.mark.parametrize("axes,named", [
    ({"data": [{"label": "x", "partition": "iid"}, {"label": "x", "partition": "dirichlet"}]},
     "'data-x' but differ in partition ('iid' vs 'dirichlet')"),
    ({"graph_file": ["my graph.txt", "my_graph.txt"]},
     "'graph_file-my_graph.txt' but differ in graph_file ('my graph.txt' vs 'my_graph.txt')"),
], ids=["one-label", "space-underscore"])
def test_points_whose_names_collide_are_refused_naming_both(axes: dict, named: str, tmp_path: Path,
                                                            capsys) -> None:
    study = {"base": CONSENSUS, "axes": axes}
    with pytest.raises(StudyError, match="both get the name") as caught:
        expand(study)
    assert named in str(caught.value)
    assert study_main([str(_write(tmp_path, study)), "--out", str(tmp_path / "studies")]) == 2
    assert "both get the name" in _one_error_line(capsys)
    assert not (tmp_path / "studies").exists()


@pytest.mark.parametrize("study,message", [
    ({"seeds": 100_000_000}, "seeds: a count in [1, 100000] "),
    ({"seeds": True}, "axes.seed: must be a non-empty list"),
    ({"axes": {"seed": list(range(100)), "rounds": list(range(100)), "lr": [0.1] * 100, "p": [0.5] * 100}},
     "100000000 points: a study may have at most 100000"),
], ids=["seeds", "boolean-seeds", "grid"])
def test_sizes_of_a_study_are_bounded_before_anything_is_built(study: dict, message: str) -> None:
    import tracemalloc
    tracemalloc.start()
    try:
        with pytest.raises(StudyError) as caught:
            expand(study)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(caught.value).startswith(message) and len(str(caught.value)) < 300
    assert peak < 10 << 20, peak
