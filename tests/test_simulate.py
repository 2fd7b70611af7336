"""p2pfl.simulate: the command line's run in this process. Its records equal `python -m p2pfl.run`'s with the same
options (a subprocess; wall-clock fields aside), bad options raise the ValueError whose line the command line
prints, and a second call in the same process runs as the first did."""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

import p2pfl
from analysis.runs import load_run
from p2pfl.run import main as run_main

from conftest import ROOT, run_job, timing_free_records

CONSENSUS = {"algorithm": "consensus", "peers": 6, "topology": "cycle", "rounds": 3, "vector_size": 30,
             "eval_every": 1, "progress": False, "plots": False}
#: A learner (local training, gossip of weights, evaluation) on the synthetic dataset, tiny.
FEDAVG = {"algorithm": "fedavg", "dataset": "synthetic", "peers": 4, "topology": "complete", "rounds": 2,
          "train_subset": 240, "batch_size": 16, "local_steps": 2, "eval_every": 1, "progress": False,
          "plots": False}


def flags(options: dict[str, Any]) -> list[str]:
    """The command line of `options` (underscores as dashes; booleans as --flag / --no-flag)."""
    out = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        out += [flag if value else "--no-" + flag[2:]] if isinstance(value, bool) else [flag, str(value)]
    return out


def config_without_place(run_dir: Path) -> dict:
    return {k: v for k, v in yaml.safe_load((run_dir / "config.yaml").read_text()).items() if k not in ("out",)}


@pytest.mark.parametrize("options", [CONSENSUS, FEDAVG], ids=["consensus", "fedavg"])
def test_simulate_records_what_the_command_line_records(options: dict, tmp_path: Path) -> None:
    cli = run_job(["-m", "p2pfl.run", *flags(options), "--out", str(tmp_path / "cli"), "--name", "r"], ranks=0)
    assert cli.returncode == 0, cli.stderr[-2000:]
    run = p2pfl.simulate(**options, out=str(tmp_path / "api"), name="r")
    assert run.path == tmp_path / "api" / "r" and run.summary is not None
    expected = timing_free_records(tmp_path / "cli" / "r")
    assert timing_free_records(run.path) == expected
    assert len(expected) == options["rounds"] + 1 + options["rounds"]  # round 0, every round, an eval each
    assert config_without_place(run.path) == config_without_place(tmp_path / "cli" / "r")
    assert run.summary["final"] == load_run(tmp_path / "cli" / "r").summary["final"]
    # the Run is the folder read back: its records and their frame
    assert [r["round"] for r in run.rounds] == list(range(options["rounds"] + 1))
    frame = run.frame()
    finals = frame[(frame["kind"] == "eval") & (frame["round"] == options["rounds"]) & frame["peer"].isna()]
    assert dict(zip(finals["metric"], finals["value"])) == run.evals[-1]["metrics"]


#: Options the command line refuses, each at a different stage: conversion, validation, an unknown option, the
#: world's resolution, and the network built inside the collective set-up (a peer left with no neighbour).
BAD = [({"rounds": "three"}, "--rounds: expected int"),
       ({"peers": 1}, "--peers: need at least 2 peers, got 1"),
       ({"frobnicate": 2}, "--frobnicate: unknown option"),
       ({"algorithm": "scaffold", "dataset": "synthetic", "batch_peers": "on"}, "--batch-peers: 'on' needs a method"),
       ({"peers": 4, "topology": "cycle", "crash": "1@1,3@1"}, "--crash 1@1,3@1: peer(s) [0, 2]")]


@pytest.mark.parametrize("bad,start", BAD, ids=["type", "range", "unknown", "resolve", "network"])
def test_bad_options_raise_the_line_the_command_line_prints(bad: dict, start: str, tmp_path: Path, capsys) -> None:
    options = {**CONSENSUS, **bad}
    with pytest.raises(ValueError) as raised:
        p2pfl.simulate(**options, out=str(tmp_path / "api"))
    message = str(raised.value)
    assert message.startswith(start) and "\n" not in message
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        run_main([*flags(options), "--out", str(tmp_path / "cli")])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"p2pfl: error: {message}"]
    assert not (tmp_path / "api").exists() or not any((tmp_path / "api").iterdir())  # refused before training


def test_a_second_call_runs_as_the_first_and_leaves_the_process_as_it_was(tmp_path: Path) -> None:
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    dtype, threads = torch.get_default_dtype(), torch.get_num_threads()
    torch.set_num_threads(threads + 1)  # a run sets its own (--threads 1); the caller's come back
    options = {**CONSENSUS, "out": str(tmp_path), "dtype": "float64"}
    first, second = p2pfl.simulate(**options), p2pfl.simulate(**options)
    assert first.path != second.path  # a fresh run folder each time
    assert timing_free_records(first.path) == timing_free_records(second.path)
    other = p2pfl.simulate(**{**options, "seed": 1})
    assert timing_free_records(other.path) != timing_free_records(first.path)
    with pytest.raises(ValueError):
        p2pfl.simulate(**{**options, "peers": 1})
    assert p2pfl.simulate(**options).summary["final"] == first.summary["final"]  # after a refused call, too
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers and torch.get_default_dtype() == dtype
    assert torch.get_num_threads() == threads + 1
    torch.set_num_threads(threads)


def test_import_p2pfl_stays_light() -> None:
    code = "import sys, p2pfl; assert 'torch' not in sys.modules; assert callable(p2pfl.simulate); print('ok')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.stdout.strip() == "ok", proc.stderr
