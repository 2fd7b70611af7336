"""A local study's pool of worker processes (p2pfl.study.local.WorkerPool, p2pfl.study.worker): its points' run
folders equal the subprocess points' (--isolate) bit for bit but for timings, pids, hosts and the process's peak
memory; a worker that dies mid-point fails that point only and is replaced; SIGTERM stops a pooled point with a
checkpoint that resumes exactly."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from p2pfl.records import TIMING_FIELDS
from p2pfl.study import StudyFolder
from p2pfl.study.__main__ import main as study_main

from conftest import ROOT
from golden_cases import normalise

BASE = {"vector_size": 40, "rounds": 3, "peers": 5, "eval_every": 0, "plots": False}
#: Two methods, both precisions and two seeds on two workers: each worker runs three points in a row, the dtype
#: changes between them (a default dtype or RNG state left behind would show in the next point's numbers).
STUDY = {"name": "pool", "base": BASE,
         "axes": {"algorithm": ["consensus", "quadratic"]},
         "points": [{"algorithm": "quadratic", "dtype": "float32", "seed": 1},
                    {"algorithm": "consensus", "dtype": "float64", "seed": 1, "topology": "complete"},
                    {"algorithm": "quadratic", "local_steps": 2, "seed": 2},
                    {"algorithm": "consensus", "dtype": "float32", "seed": 3, "link_failure": 0.3}]}


def _study(tmp_path: Path, study: dict, *flags: str) -> tuple[int, StudyFolder]:
    out = tmp_path / ("isolated" if "--isolate" in flags else "pooled")
    path = tmp_path / f"{study['name']}.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    rc = study_main([str(path), "--out", str(out), "--jobs", "2", *flags])
    return rc, StudyFolder(out / study["name"])


def _untimed(value: Any) -> Any:
    """A summary or manifest without what measures the process rather than the run: timings (keys ending _s and
    the records' timing fields), hosts and peak memory."""
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items()
                if not k.endswith("_s") and k not in TIMING_FIELDS and k not in ("host", "memory_peak")}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def _folder_text(folder: StudyFolder, name: str, file: str) -> str:
    """A run's JSON file, untimed, as text (NaN compares equal; the study's folder written as STUDY)."""
    data = json.loads((folder.run_dir(name) / file).read_text())
    return json.dumps(_untimed(data), sort_keys=True).replace(str(folder.path.parent), "STUDY")


def _log_shape(folder: StudyFolder, name: str) -> list[str]:
    """A point's log with its numbers masked (timings) and the study's folder as STUDY: what it says, line by line."""
    text = folder.log(name).read_text().replace(str(folder.path.parent), "STUDY")
    return [re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", line) for line in text.splitlines()]


def test_pooled_points_equal_subprocess_points_record_for_record(tmp_path: Path) -> None:
    rc_pooled, pooled = _study(tmp_path, STUDY)
    rc_isolated, isolated = _study(tmp_path, STUDY, "--isolate")
    assert rc_pooled == rc_isolated == 0
    names = sorted(p.name for p in (pooled.path / "runs").iterdir())
    assert len(names) == 6 and names == sorted(p.name for p in (isolated.path / "runs").iterdir())
    assert all(pooled.state(n).state == "done" for n in names)
    for name in names:
        a, b = normalise(pooled.run_dir(name) / "metrics.jsonl"), normalise(isolated.run_dir(name) / "metrics.jsonl")
        assert len(a) == len(b) > BASE["rounds"]  # round 0 .. 3 and any evaluation
        assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True), name
        for file in ("summary.json", "manifest.json"):
            assert _folder_text(pooled, name, file) == _folder_text(isolated, name, file), (name, file)
        config = [(f.run_dir(name) / "config.yaml").read_text().replace(str(f.path.parent), "STUDY")
                  for f in (pooled, isolated)]
        assert config[0] == config[1]
        assert _log_shape(pooled, name) == _log_shape(isolated, name)  # no message lost or repeated in a worker


#: A plug-in that kills its worker in round 2 of the point that loads it (a segfault or OOM kill, as a pool sees it).
#: The study runner imports it too, to check the point's options: there (the test's own process, PARENT) it
#: never kills, and the test puts the unpatched round back when it ends.
DIE = """import os
from p2pfl import runner

_round = runner.Runner._round
PARENT = {parent}


def _dying_round(self, t):
    if t == 2 and os.getpid() != PARENT:
        os._exit(3)
    return _round(self, t)


runner.Runner._round = _dying_round
"""


def test_a_worker_that_dies_mid_point_fails_that_point_and_the_others_finish(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from p2pfl import runner

    monkeypatch.setattr(runner.Runner, "_round", runner.Runner._round)  # restored after the plug-in patches it
    (tmp_path / "die.py").write_text(DIE.format(parent=os.getpid()))
    study = {"name": "dies", "base": {**BASE, "algorithm": "consensus"}, "axes": {"seed": [0, 1, 2, 3, 4]},
             "points": [{"seed": 9, "plugins": [str(tmp_path / "die.py")]}]}
    rc, folder = _study(tmp_path, study)
    assert rc == 1
    names = [p["name"] for p in folder.plan()["points"]]
    dying = next(n for n in names if n.startswith("seed-9"))
    states = {s.name: s for s in folder.states(names)}
    assert {n: s.state for n, s in states.items()} == {n: "failed" if n == dying else "done" for n in names}
    assert folder.rc(dying) == 3
    assert "worker" in states[dying].error and "died running this point: exit 3" in states[dying].error
    rounds = (folder.run_dir(dying) / "metrics.jsonl").read_text().count('"type": "round"')
    assert rounds == 2  # round 0 and 1 written, then the worker died in round 2


def test_a_pooled_point_stopped_by_sigterm_resumes_exactly(tmp_path: Path) -> None:
    """SIGTERM to the study runner in round 2 reaches the worker running the point: it checkpoints at the round's
    end (exit 75, preempted); the study run again resumes it, and its records equal an uninterrupted run's."""
    slow = {"algorithm": "fedavg", "peers": 6, "rounds": 6, "topology": "cycle", "dataset": "synthetic",
            "train_subset": 600, "batch_size": 16, "local_steps": 30, "eval_every": 0, "plots": False,
            "batch_peers": "off"}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"name": "p", "base": slow, "axes": {"seed": [3]}}))
    out = tmp_path / "studies"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "p2pfl.study", str(path), "--out", str(out)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    run = out / "p" / "runs" / "seed-3"
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while (not metrics.is_file() or metrics.read_text().count('"type": "round"') < 2) and proc.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=120)[0]
    assert "in a worker process" in output and "seed-3: preempted" in output, output
    folder = StudyFolder(out / "p")
    assert folder.state("seed-3").state == "preempted" and folder.rc("seed-3") == 75
    assert metrics.read_text().count('"type": "round"') < 7
    resumed = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-2000:]
    assert folder.state("seed-3").state == "done"
    direct = subprocess.run([sys.executable, "-m", "p2pfl.run", "--config", str(folder.config("seed-3")),
                             "--out", str(tmp_path), "--name", "whole", "--no-progress"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert direct.returncode == 0, direct.stderr[-2000:]
    assert normalise(metrics) == normalise(tmp_path / "whole" / "metrics.jsonl")
