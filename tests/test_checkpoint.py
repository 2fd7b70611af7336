"""Checkpoints: a run interrupted and resumed gives the same numbers as one that never stopped, for every method
and also when the resumed job runs on another number of ranks."""
from __future__ import annotations

import json
import random
import signal
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from p2pfl import algorithms
from p2pfl.rounds import Runner
from p2pfl.run import main
from p2pfl.runtime.checkpoint import FORMAT, load_peer, record_state, restore_record, save_peer
from p2pfl.runtime.preemption import PREEMPTED_EXIT

from conftest import run_job

BASE = ["-m", "p2pfl.run", "--algorithm", "dec-ssl", "--dataset", "synthetic", "--peers", "4", "--local-steps",
        "2", "--batch-size", "32", "--probe-epochs", "2", "--knn-k", "20", "--no-progress", "--no-plots",
        "--checkpoint-every", "1", "--batch-peers", "off"]  # resumed on 2 ranks, compared bit for bit


def _numbers(run_dir: Path) -> list[dict]:
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        out.append({k: v for k, v in record.items() if not k.startswith("time_") and k not in ("elapsed_s",
                                                                                            "round_s")})
    return out


@pytest.mark.parametrize("resume_ranks", [0, pytest.param(2, marks=pytest.mark.mpi)])
def test_resume_equals_uninterrupted(runs_dir: Path, resume_ranks: int) -> None:
    full = run_job([*BASE, "--rounds", "3", "--out", str(runs_dir), "--name", "full"], ranks=0)
    assert full.returncode == 0, full.stderr[-2000:]
    part = run_job([*BASE, "--rounds", "2", "--out", str(runs_dir), "--name", "part"], ranks=0)
    assert part.returncode == 0, part.stderr[-2000:]
    resumed = run_job([*BASE, "--rounds", "3", "--resume", str(runs_dir / "part")], ranks=resume_ranks)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    full_records = [r for r in _numbers(runs_dir / "full") if r["type"] == "round"]
    resumed_records = [r for r in _numbers(runs_dir / "part") if r["type"] == "round"]
    assert [r["round"] for r in resumed_records] == [0, 1, 2, 3]
    assert resumed_records == full_records
    final_full = [r for r in _numbers(runs_dir / "full") if r["type"] == "eval"][-1]
    final_resumed = [r for r in _numbers(runs_dir / "part") if r["type"] == "eval"][-1]
    assert final_resumed == final_full


# ------------------------------------------------------------------ every method, stopped and resumed in-process
TINY = ["--peers", "3", "--rounds", "3", "--topology", "cycle", "--dataset", "synthetic", "--train-subset", "96",
        "--batch-size", "16", "--local-steps", "2", "--keep-optimizer", "--eval-every", "0", "--probe-epochs", "1",
        "--knn-k", "5", "--eval-peers", "1", "--public-size", "48", "--public-batch", "8", "--rep-dim", "16",
        "--vector-size", "50", "--no-progress", "--no-plots"]  # --batch-peers auto: batchable methods stacked
#: Cases beyond one per method: an attacker's memory (ALIE keeps what it heard) is checkpointed with its record.
EXTRA = {"moon-alie": ["--algorithm", "moon", "--prev-models", "2", "--byzantine", "1", "--attack", "alie"]}
#: Dec-MAE's ViT costs most to build and score: two peers.
SMALLER = {"dec-mae": ["--peers", "2", "--topology", "complete"]}
CASES = {**{name: ["--algorithm", name, *SMALLER.get(name, [])] for name in algorithms.names()}, **EXTRA}


def _stop_after(monkeypatch: pytest.MonkeyPatch, last: int) -> None:
    """The next run receives SIGTERM at the end of round `last`: it checkpoints and exits as a preempted job."""
    original = Runner._round

    def round_then_signal(self: Runner, t: int) -> dict:
        record = original(self, t)
        if t == last:
            signal.raise_signal(signal.SIGTERM)
        return record
    monkeypatch.setattr(Runner, "_round", round_then_signal)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_method_resumes_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    """Stopped after round 1 of 3 (a preemption) and resumed, every registered method's records equal the
    uninterrupted run's: the checkpoint (tensors and plain values only) keeps all a peer's state."""
    args = [*TINY, *CASES[case], "--out", str(tmp_path)]
    _stop_after(monkeypatch, 1)
    with pytest.raises(SystemExit) as stopped:
        main([*args, "--name", "stopped"])
    assert stopped.value.code == PREEMPTED_EXIT
    monkeypatch.undo()
    assert main([*args, "--resume", str(tmp_path / "stopped")]) == 0
    assert main([*args, "--name", "whole"]) == 0
    resumed, whole = _numbers(tmp_path / "stopped"), _numbers(tmp_path / "whole")
    assert [r["round"] for r in resumed if r["type"] == "round"] == [0, 1, 2, 3]
    assert resumed == whole


# ------------------------------------------------------------------ what a checkpoint may hold
def leave_marker(path: str) -> None:
    """What the crafted checkpoint below would run on loading: it leaves a file behind."""
    Path(path).write_text("ran")


class RunsCode:
    """Unpickled, it calls leave_marker(marker) (a checkpoint crafted to run code)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return leave_marker, (self.marker,)


CONSENSUS = ["--algorithm", "consensus", "--peers", "4", "--vector-size", "50", "--topology", "cycle",
             "--eval-every", "0", "--no-progress", "--no-plots", "--checkpoint-every", "1"]
REFUSED = ("holds objects other than tensors and plain values (refused: loading it could run code; written by an "
           "older p2pfl, or not by p2pfl)")


@pytest.mark.parametrize("payload", ["code", "set"])
def test_a_checkpoint_holding_other_objects_is_refused_without_running_them(tmp_path: Path, capsys,
                                                                            payload: str) -> None:
    """A peer file whose pickle would call a function on loading (or holds a set, which no record writes) is one
    line naming it, and the function never runs."""
    assert main([*CONSENSUS, "--rounds", "2", "--out", str(tmp_path), "--name", "r"]) == 0
    path = tmp_path / "r" / "checkpoint" / "peer-00001.r000002.pt"
    marker = tmp_path / "marker"
    state = torch.load(path, weights_only=True)["state"]
    state["x"] = RunsCode(marker) if payload == "code" else {1, 2}
    torch.save({"format": FORMAT, "peer": 1, "round": 2, "state": state}, path)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main([*CONSENSUS, "--rounds", "3", "--resume", str(tmp_path / "r")])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"p2pfl: error: --resume: {path} {REFUSED}"]
    assert not marker.exists()


@dataclass(eq=False)
class Streams:
    """A record holding every kind of random generator, a numpy array and nested plain values."""

    torch_rng: torch.Generator
    numpy_rng: np.random.Generator
    legacy_rng: np.random.RandomState
    python_rng: random.Random
    array: np.ndarray
    values: dict


def _streams(seed: int) -> Streams:
    return Streams(torch.Generator().manual_seed(seed), np.random.default_rng(seed), np.random.RandomState(seed),
                   random.Random(seed), np.arange(seed, seed + 3, dtype=np.uint32),
                   {"n": seed, "t": torch.full((2,), float(seed)), "l": [1.5, None, "s", (True, seed)]})


def test_generators_and_arrays_are_kept_as_tensors_and_plain_values(tmp_path: Path) -> None:
    """torch's, numpy's (Generator and RandomState, a cached gaussian too) and python's generators continue
    exactly where they were saved, read back without running code; arrays come back as arrays."""
    cpu = torch.device("cpu")
    saved = _streams(1)
    torch.rand(5, generator=saved.torch_rng)
    saved.numpy_rng.random(5)
    saved.legacy_rng.standard_normal()  # leaves a cached gaussian in the state
    saved.python_rng.gauss(0.0, 1.0)  # likewise
    save_peer(tmp_path, 0, 1, record_state(saved))
    fresh = _streams(2)
    restore_record(fresh, load_peer(tmp_path, 0, 1, cpu), cpu)
    assert torch.equal(torch.rand(4, generator=fresh.torch_rng), torch.rand(4, generator=saved.torch_rng))
    assert np.array_equal(fresh.numpy_rng.random(4), saved.numpy_rng.random(4))
    assert fresh.legacy_rng.standard_normal() == saved.legacy_rng.standard_normal()
    assert np.array_equal(fresh.legacy_rng.random_sample(4), saved.legacy_rng.random_sample(4))
    assert fresh.python_rng.gauss(0.0, 1.0) == saved.python_rng.gauss(0.0, 1.0)
    assert fresh.python_rng.random() == saved.python_rng.random()
    assert fresh.array.dtype == np.uint32 and np.array_equal(fresh.array, saved.array)
    assert fresh.values["n"] == 1 and fresh.values["l"] == [1.5, None, "s", (True, 1)]
    assert torch.equal(fresh.values["t"], saved.values["t"])


@dataclass(eq=False)
class Odd:
    fine: int
    odd: object


def test_a_record_field_of_another_kind_is_refused_when_saved() -> None:
    with pytest.raises(TypeError, match=r"^Odd\.odd: a builtins\.object$"):
        record_state(Odd(1, object()))
