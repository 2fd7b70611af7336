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
             "points": [{"topology": "cycle", "seed": 0, "mixing": "server"}]}  # server needs the star: fails
    path = _write(tmp_path, study)
    out = tmp_path / "studies"
    assert study_main([str(path), "--out", str(out), "--jobs", "2"]) == 1
    folder = StudyFolder(out / "s")
    states = {s.name: s for s in folder.states([p.name for p in load_study(path)[0].points])}
    bad = "topology-cycle__seed-0__mixing-server"
    assert {n: s.state for n, s in states.items()} == {**{n: "done" for n in states if n != bad}, bad: "failed"}
    assert states[bad].error.startswith("p2pfl: error: --mixing: server is the star's hub")
    for name in states:
        if name != bad:
            run = folder.run_dir(name)
            assert (run / "summary.json").is_file() and (run / "manifest.json").is_file()
            assert yaml.safe_load(folder.config(name).read_text())["vector_size"] == 50
    capsys.readouterr()
    assert study_main([str(out / "s"), "--status"]) == 0
    report = capsys.readouterr().out
    assert "done 4  running 0  failed 1  preempted 0  pending 0  (of 5)" in report
    assert f"failed  {bad}: p2pfl: error: --mixing:" in report
    # fixed in the study file: only the failed point runs again; its first attempt's folder is kept
    study["points"][0]["mixing"] = "metropolis"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    assert study_main([str(path), "--out", str(out), "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert "1 of 5 points to run" in dry and "topology-cycle__seed-0__mixing-metropolis" in dry
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
