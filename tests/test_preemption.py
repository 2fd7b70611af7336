"""Preemption: a stop signal ends every rank at the end of the round with a checkpoint and exit status 75, and
the resumed run equals an uninterrupted one bit for bit; one that comes in set-up ends every rank with 75 before
the first round, leaving no run folder (a resumed one as it was) and a study point preempted, not failed; a
checkpoint interrupted while being written leaves the previous one usable; an unreadable checkpoint file is one
line naming it."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from p2pfl.run import main
from p2pfl.runtime.preemption import HOLD_ENV, PREEMPTED_EXIT
from p2pfl.study import StudyFolder

from conftest import ROOT, mpirun_path, run_job
from golden_cases import normalise

JOB = ["-m", "p2pfl.run", "--algorithm", "fedavg", "--peers", "8", "--rounds", "6", "--topology", "cycle",
       "--dataset", "synthetic", "--train-subset", "800", "--batch-size", "16", "--local-steps", "30",
       "--eval-every", "0", "--no-progress", "--no-plots", "--batch-peers", "off"]  # resumed on 2 ranks, bitwise


def _rounds_written(run_dir: Path) -> int:
    path = run_dir / "metrics.jsonl"
    return path.read_text().count('"type": "round"') if path.is_file() else 0


@pytest.mark.mpi
def test_sigterm_to_mpirun_stops_after_the_round_and_the_resumed_run_is_exact(tmp_path: Path) -> None:
    launcher = mpirun_path()
    if launcher is None:
        pytest.skip("no mpirun available")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [launcher, "-n", "4", sys.executable, *JOB, "--out", str(tmp_path)]
    job = subprocess.Popen([*cmd, "--name", "stopped"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while _rounds_written(tmp_path / "stopped") < 3 and time.monotonic() < deadline:  # round 0, 1, 2 written
        time.sleep(0.05)
    job.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    out, err = job.communicate(timeout=120)
    took = time.monotonic() - sent
    assert job.returncode == PREEMPTED_EXIT, err[-3000:]
    # Round 2's record is written just before the ranks check for a signal, so one that lands in between stops
    # the run after round 2; otherwise round 3 is under way and the run stops after it. Never later.
    stopped = re.search(r"p2pfl: warning: SIGTERM received: stopped after round (\d+) of 6 with a checkpoint", err)
    assert stopped is not None, err[-3000:]
    last = int(stopped.group(1))
    assert last in (2, 3), err[-3000:]
    records = normalise(tmp_path / "stopped" / "metrics.jsonl")
    assert [r["round"] for r in records] == list(range(last + 1))
    lines = (tmp_path / "stopped" / "metrics.jsonl").read_text().splitlines()[1:]
    round_s = max(json.loads(line)["round_s"] for line in lines)
    assert took < round_s + 10, (took, round_s)  # the rest of the round under way, then out within seconds
    resumed = run_job([*JOB, "--resume", str(tmp_path / "stopped")], ranks=2, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    whole = run_job([*JOB, "--out", str(tmp_path), "--name", "whole"], ranks=0, timeout=300)  # peers are not ranks
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert normalise(tmp_path / "stopped" / "metrics.jsonl") == normalise(tmp_path / "whole" / "metrics.jsonl")


def _signal_in_set_up(cmd: list[str], held: Path, sig: int = signal.SIGTERM) -> subprocess.CompletedProcess:
    """Run `cmd` (a p2pfl.run, or a study running one) with its set-up held at HOLD_ENV's file, send `sig` to it
    once the run is there, and return how it ended: the run certainly got the signal in set-up, as it waits for
    one there."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", HOLD_ENV: str(held)}
    job = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not held.exists() and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert held.exists(), job.communicate(timeout=60)
    job.send_signal(sig)
    out, err = job.communicate(timeout=300)
    return subprocess.CompletedProcess(cmd, job.returncode, out, err)


CONSENSUS = ["--algorithm", "consensus", "--peers", "6", "--vector-size", "500", "--topology", "cycle",
             "--link-failure", "0.2", "--eval-every", "0", "--no-progress", "--no-plots", "--checkpoint-every", "1"]


def test_a_checkpoint_cut_short_while_written_leaves_the_previous_one(tmp_path: Path) -> None:
    assert main([*CONSENSUS, "--rounds", "2", "--out", str(tmp_path), "--name", "cut"]) == 0
    ckpt = tmp_path / "cut" / "checkpoint"
    assert sorted(p.name for p in ckpt.iterdir()) == [f"peer-{p:05d}.r000002.pt" for p in range(6)] + ["state.json"]
    # the job died writing round 3: two peer files written (one cut short), the state file not yet
    (ckpt / "peer-00000.r000003.pt").write_bytes((ckpt / "peer-00000.r000002.pt").read_bytes())
    (ckpt / "peer-00001.r000003.pt").write_bytes((ckpt / "peer-00001.r000002.pt").read_bytes()[:100])
    assert main([*CONSENSUS, "--rounds", "5", "--resume", str(tmp_path / "cut")]) == 0
    assert main([*CONSENSUS, "--rounds", "5", "--out", str(tmp_path), "--name", "whole"]) == 0
    cut, whole = (normalise(tmp_path / name / "metrics.jsonl") for name in ("cut", "whole"))
    assert [r for r in cut if r["type"] == "round"] == [r for r in whole if r["type"] == "round"]
    assert cut[-1] == whole[-1] and cut[-1]["final"]  # the final evaluation (the first run's round-2 one aside)
    assert sorted(p.name for p in ckpt.iterdir()) == [f"peer-{p:05d}.r000005.pt" for p in range(6)] + ["state.json"]


@pytest.mark.parametrize(("damage", "message"), [
    (lambda f: f.write_bytes(f.read_bytes()[: len(f.read_bytes()) // 2]), "does not match the sha256 digest"),
    (lambda f: torch.save({"weights": torch.zeros(3)}, f), "does not match the sha256 digest"),
    (lambda f: f.unlink(), "is missing (the checkpoint of round 2 is incomplete)"),
])
def test_a_damaged_checkpoint_file_is_one_line_naming_it(tmp_path: Path, capsys, damage, message: str) -> None:
    assert main([*CONSENSUS, "--rounds", "2", "--out", str(tmp_path), "--name", "r"]) == 0
    path = tmp_path / "r" / "checkpoint" / "peer-00001.r000002.pt"
    damage(path)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main([*CONSENSUS, "--rounds", "4", "--resume", str(tmp_path / "r")])
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"p2pfl: error: --resume: {path} {message}")


def test_a_damaged_state_file_is_one_line_naming_it(tmp_path: Path, capsys) -> None:
    assert main([*CONSENSUS, "--rounds", "1", "--out", str(tmp_path), "--name", "r"]) == 0
    state = tmp_path / "r" / "checkpoint" / "state.json"
    state.write_text('{"round": ')
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main([*CONSENSUS, "--rounds", "3", "--resume", str(tmp_path / "r")])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"p2pfl: error: --resume: {state} is not a readable checkpoint state (JSONDecodeError)"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_in_set_up_exits_75_and_leaves_no_run_folder(tmp_path: Path, sig: int) -> None:
    cmd = [sys.executable, "-m", "p2pfl.run", *CONSENSUS, "--rounds", "3", "--out", str(tmp_path / "runs"),
           "--name", "r"]
    ended = _signal_in_set_up(cmd, tmp_path / "held", sig)
    assert ended.returncode == PREEMPTED_EXIT, ended.stderr[-3000:]
    name = signal.Signals(sig).name
    assert f"p2pfl: {name} received in set-up: stopped before the first round" in ended.stdout, ended.stdout
    assert "Traceback" not in ended.stderr, ended.stderr[-3000:]
    assert not (tmp_path / "runs" / "r").exists()  # nothing to resume, nothing to read as failed
    assert main([*CONSENSUS, "--rounds", "3", "--out", str(tmp_path / "runs"), "--name", "r"]) == 0  # same name


def test_a_resumed_run_stopped_in_set_up_is_left_as_it_was_and_resumes(tmp_path: Path) -> None:
    assert main([*CONSENSUS, "--rounds", "2", "--out", str(tmp_path), "--name", "r"]) == 0
    run = tmp_path / "r"
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    cmd = [sys.executable, "-m", "p2pfl.run", *CONSENSUS, "--rounds", "4", "--resume", str(run)]
    ended = _signal_in_set_up(cmd, tmp_path / "held")
    assert ended.returncode == PREEMPTED_EXIT, ended.stderr[-3000:]
    assert f"continue with --resume {run}" in ended.stdout, ended.stdout
    after = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before
    assert main([*CONSENSUS, "--rounds", "4", "--resume", str(run)]) == 0
    assert [r["round"] for r in normalise(run / "metrics.jsonl") if r["type"] == "round"] == list(range(5))


@pytest.mark.parametrize("ranks", [1, pytest.param(2, marks=pytest.mark.mpi)])
def test_a_study_point_stopped_in_set_up_is_preempted_not_failed_and_runs_again(tmp_path: Path, ranks: int) -> None:
    """SIGTERM to the study runner while its point (on 1 rank, or 2 under mpirun: every rank exits) is in set-up:
    the point exits 75 and reads preempted, with no run folder and nothing kept as a failed attempt; the study run
    again finishes it."""
    if ranks > 1 and mpirun_path() is None:
        pytest.skip("no mpirun available")
    options = {"algorithm": "consensus", "peers": 4, "vector_size": 50, "rounds": 2, "eval_every": 0, "plots": False}
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({"name": "s", "base": options, "axes": {"seed": [0]}}))
    out = tmp_path / "studies"
    cmd = [sys.executable, "-m", "p2pfl.study", str(study), "--out", str(out), "--ranks-per-run", str(ranks)]
    ended = _signal_in_set_up(cmd, tmp_path / "held")
    assert "seed-0: preempted" in ended.stdout, ended.stdout + ended.stderr[-3000:]
    folder = StudyFolder(out / "s")
    assert folder.rc("seed-0") == PREEMPTED_EXIT and folder.state("seed-0").state == "preempted"
    assert not folder.run_dir("seed-0").exists()
    again = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-3000:]
    assert folder.state("seed-0").state == "done" and not (out / "s" / "failed").exists()
