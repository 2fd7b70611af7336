"""A study on a real Slurm: one job array (a task per point), a point that fails alone and is reported with its
error line, a task requeued in the middle that resumes exactly, and the report built from what came back."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from p2pfl.study import StudyFolder

from conftest import ROOT
from golden_cases import normalise

pytestmark = pytest.mark.slurm

TINY = {"algorithm": "consensus", "vector_size": 50, "rounds": 2, "peers": 4, "eval_every": 0, "plots": False}


def _study(tmp_path: Path, slurm, study: dict, *flags: str) -> tuple[subprocess.CompletedProcess, dict]:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    env = {**os.environ, **slurm.env, "P2PFL_VENV": str(Path(sys.executable).parent.parent),
           "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "p2pfl.study", str(path), "--out", str(tmp_path / "studies"), *flags]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120), env


def _job(out: str) -> int:
    return int(out.split("submitted job array ")[1].split()[0])


def test_a_study_as_a_job_array_completes_reports_its_failure_and_builds_its_report(tmp_path: Path, slurm) -> None:
    study = {"name": "arr", "base": TINY, "axes": {"topology": ["cycle", "complete"], "seed": [0]},
             "points": [{"topology": "cycle", "seed": 1}, {"topology": "cycle", "seed": 2, "crash": "1@1,3@1"}]}
    dry, _ = _study(tmp_path, slurm, study, "--slurm", "--dry-run")
    assert dry.returncode == 0 and "sbatch --parsable --array=0-3%16" in dry.stdout and "study.sbatch" in dry.stdout
    submitted, env = _study(tmp_path, slurm, study, "--slurm", "--throttle", "2")
    assert submitted.returncode == 0, submitted.stderr
    states = slurm.wait(_job(submitted.stdout), timeout=240)
    assert sorted(states.values()) == ["COMPLETED", "COMPLETED", "COMPLETED", "FAILED"], states
    folder = StudyFolder(tmp_path / "studies" / "arr")
    bad = "topology-cycle__seed-2__crash-1_1_3_1"
    for name in ("topology-cycle__seed-0", "topology-complete__seed-0", "topology-cycle__seed-1"):
        assert folder.state(name).state == "done" and (folder.run_dir(name) / "summary.json").is_file()
    assert folder.state(bad).state == "failed" and folder.rc(bad) == 2
    status = subprocess.run([sys.executable, "-m", "p2pfl.study", str(folder.path), "--status"], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=60)
    assert "done 3  running 0  failed 1" in status.stdout, status.stdout
    assert f"failed  {bad}: p2pfl: error: --crash 1@1,3@1: peer(s) [0, 2] would have no neighbour" in status.stdout
    report = subprocess.run([sys.executable, "-m", "analysis.report", str(folder.path), "--no-plots"], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    text = (folder.path / "report" / "report.md").read_text()
    assert bad in text and "--crash 1@1,3@1: peer(s) [0, 2] would have no neighbour" in text


SLOW = {"algorithm": "fedavg", "peers": 6, "rounds": 6, "topology": "cycle", "dataset": "synthetic",
        "train_subset": 600, "batch_size": 16, "local_steps": 30, "eval_every": 0, "plots": False,
        "batch_peers": "off"}  # compared bit for bit with a one-process run of the point


def test_an_array_task_requeued_in_the_middle_resumes_exactly(tmp_path: Path, slurm) -> None:
    submitted, env = _study(tmp_path, slurm, {"name": "pre", "base": SLOW, "axes": {"seed": [4]}}, "--slurm",
                            "--ranks-per-run", "2")
    assert submitted.returncode == 0, submitted.stderr
    job = _job(submitted.stdout)
    folder = StudyFolder(tmp_path / "studies" / "pre")
    metrics = folder.run_dir("seed-4") / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while (not metrics.is_file() or metrics.read_text().count('"type": "round"') < 3) and time.monotonic() < deadline:
        time.sleep(0.05)
    slurm.requeue(f"{job}_0")
    states = slurm.wait(job, timeout=300)
    assert list(states.values()) == ["COMPLETED"], states
    log = folder.log("seed-4").read_text()
    assert log.count("as Slurm task") == 2 and "--resume" not in log.splitlines()[0]
    assert folder.state("seed-4").state == "done"
    direct = subprocess.run([sys.executable, "-m", "p2pfl.run", "--config", str(folder.config("seed-4")), "--out",
                             str(tmp_path), "--name", "whole", "--no-progress"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert direct.returncode == 0, direct.stderr[-2000:]
    assert normalise(metrics) == normalise(tmp_path / "whole" / "metrics.jsonl")


TUNED = {"algorithm": "fedavg", "model": "mlp", "dataset": "synthetic", "train_subset": 200, "peers": 4, "rounds": 2,
         "local_steps": 1, "batch_size": 16, "optimizer": "sgd", "momentum": 0.0, "eval_every": 0, "plots": False}


def test_a_tuned_study_submits_its_tuning_then_its_finals_with_the_choice(tmp_path: Path, slurm) -> None:
    """Two arrays: the tuning points, then the final points after them (afterany); each final task makes the
    choice from the finished tuning runs and runs with it."""
    study = {"name": "tuned", "base": TUNED, "axes": {"topology": ["cycle", "complete"]}, "seeds": 1,
             "tune": {"grid": {"lr": [0.01, 0.5]}, "seeds": [9], "validation": 0.2}}
    dry, _ = _study(tmp_path, slurm, study, "--slurm", "--dry-run")
    commands = dry.stdout.strip().splitlines()
    assert len(commands) == 2 and commands[0].startswith("sbatch --parsable --array=0-3%16")
    assert commands[0].endswith("array-tuning.txt") and "--array=0-1%16" in commands[1]
    assert commands[1].split()[-3] == "--dependency=afterany:TUNING_JOB_ID"
    submitted, _ = _study(tmp_path, slurm, study, "--slurm")
    assert submitted.returncode == 0, submitted.stderr
    tuning = int(submitted.stdout.split("submitted tuning array ")[1].split()[0])
    finals = int(submitted.stdout.split("; job array ")[1].split()[0])
    assert "(4 points)" in submitted.stdout and "(2 points, after the tuning)" in submitted.stdout
    assert sorted(slurm.wait(tuning, timeout=240).values()) == ["COMPLETED"] * 4
    assert sorted(slurm.wait(finals, timeout=240).values()) == ["COMPLETED"] * 2
    folder = StudyFolder(tmp_path / "studies" / "tuned")
    selection = yaml.safe_load((folder.path / "tuning.json").read_text())
    for arm in selection["arms"]:
        name = f"topology-{arm['arm']['topology']}__seed-0"
        assert folder.state(name).state == "done"
        ran = yaml.safe_load((folder.run_dir(name) / "config.yaml").read_text())
        assert ran["lr"] == arm["chosen"]["lr"] and ran["validation"] == 0.0
