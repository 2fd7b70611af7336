"""Preemption: a stop signal ends every rank at the end of the round with a checkpoint and exit status 75, and
the resumed run equals an uninterrupted one bit for bit; a checkpoint interrupted while being written leaves
the previous one usable; an unreadable checkpoint file is one line naming it."""
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

from p2pfl.run import main
from p2pfl.runtime.preemption import PREEMPTED_EXIT

from conftest import ROOT, mpirun_path
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
    stopped = re.search(r"stopped after round (\d+) of 6 with a checkpoint", out)
    assert stopped is not None, out[-3000:]
    last = int(stopped.group(1))
    assert last in (2, 3), out[-3000:]
    records = normalise(tmp_path / "stopped" / "metrics.jsonl")
    assert [r["round"] for r in records] == list(range(last + 1))
    lines = (tmp_path / "stopped" / "metrics.jsonl").read_text().splitlines()[1:]
    round_s = max(json.loads(line)["round_s"] for line in lines)
    assert took < round_s + 10, (took, round_s)  # the rest of the round under way, then out within seconds
    resumed = subprocess.run([launcher, "-n", "2", sys.executable, *JOB, "--resume", str(tmp_path / "stopped")],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    whole = subprocess.run([*cmd, "--name", "whole"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert normalise(tmp_path / "stopped" / "metrics.jsonl") == normalise(tmp_path / "whole" / "metrics.jsonl")


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
