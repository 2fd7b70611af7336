"""Checkpoints: a run interrupted and resumed gives the same numbers as one that never stopped, for every method
and also when the resumed job runs on another number of ranks."""
from __future__ import annotations

import hashlib
import json
import random
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from p2pfl import algorithms
from p2pfl.run import main
from p2pfl.runner import Runner
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
    line naming it, and the function never runs, also when the state file records the crafted file's digest."""
    assert main([*CONSENSUS, "--rounds", "2", "--out", str(tmp_path), "--name", "r"]) == 0
    path = tmp_path / "r" / "checkpoint" / "peer-00001.r000002.pt"
    marker = tmp_path / "marker"
    state = torch.load(path, weights_only=True)["state"]
    state["x"] = RunsCode(marker) if payload == "code" else {1, 2}
    forge(path, {"format": FORMAT, "peer": 1, "round": 2, "state": state})
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main([*CONSENSUS, "--rounds", "3", "--resume", str(tmp_path / "r")])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"p2pfl: error: --resume: {path} {REFUSED}"]
    assert not marker.exists()


# ------------------------------------------------------------------ damaged checkpoints
def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def forge(path: Path, blob: object) -> None:
    """Save `blob` as the peer file `path` and record its digest in the state file, as one who rewrote both
    would: what is then refused is refused for what the file holds."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # torch.save recurses into nested lists
    try:
        torch.save(blob, path)
    finally:
        sys.setrecursionlimit(limit)
    state_file = path.parent / "state.json"
    state = json.loads(state_file.read_text())
    state["sha256"][str(int(path.name[len("peer-"):].split(".")[0]))] = sha256(path)
    state_file.write_text(json.dumps(state))


def snapshot(run_dir: Path) -> dict[str, bytes]:
    """Every file of a run folder by its path, but the lock (which only says who holds the folder)."""
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def refused_resume(run_dir: Path, capsys) -> list[str]:
    """Resume `run_dir` for one more round, expecting a refusal (exit 2) that leaves every file as it was; its
    stderr lines."""
    before = snapshot(run_dir)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main([*CONSENSUS, "--rounds", "3", "--resume", str(run_dir)])
    assert exit_.value.code == 2
    assert snapshot(run_dir) == before
    return capsys.readouterr().err.strip().splitlines()


def test_the_state_file_records_every_peer_files_digest(tmp_path: Path) -> None:
    assert main([*CONSENSUS, "--rounds", "2", "--out", str(tmp_path), "--name", "r"]) == 0
    folder = tmp_path / "r" / "checkpoint"
    state = json.loads((folder / "state.json").read_text())
    assert state["sha256"] == {str(p): sha256(folder / f"peer-{p:05d}.r000002.pt") for p in range(4)}


def test_flipped_bytes_in_a_peer_file_are_refused_and_nothing_changes(tmp_path: Path, capsys) -> None:
    """64 bytes flipped inside a peer's vector (the file still loads): one line naming the file, exit 2, every
    file of the run folder byte for byte as it was."""
    assert main([*CONSENSUS, "--rounds", "2", "--out", str(tmp_path), "--name", "r"]) == 0
    path = tmp_path / "r" / "checkpoint" / "peer-00002.r000002.pt"
    raw = bytearray(path.read_bytes())
    at = raw.find(torch.load(path, weights_only=True)["state"]["x"].numpy().tobytes())
    assert at > 0
    raw[at:at + 64] = bytes(b ^ 0xFF for b in raw[at:at + 64])
    path.write_bytes(bytes(raw))
    assert torch.load(path, weights_only=True)["state"]["x"].shape == (50,)  # what used to resume silently
    assert refused_resume(tmp_path / "r", capsys) == [
        f"p2pfl: error: --resume: {path} does not match the sha256 digest that checkpoint/state.json records for "
        "it (damaged or changed after it was written)"]


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("damage", ["shape", "dtype", "string", "list"])
def test_a_peer_file_of_another_form_is_refused_naming_it(tmp_path: Path, capsys, damage: str) -> None:
    """Values that are plain but do not have the form of this run's record (a peer's vector of 50): one line naming
    the file and the field, nothing changed."""
    assert main([*CONSENSUS, "--rounds", "2", "--out", str(tmp_path), "--name", "r"]) == 0
    path = tmp_path / "r" / "checkpoint" / "peer-00001.r000002.pt"
    blob = torch.load(path, weights_only=True)
    x = blob["state"]["x"]
    other = torch.float64 if x.dtype != torch.float64 else torch.float32
    value, kind = {"shape": (x[:49], f"a {str(x.dtype)[6:]} tensor of shape [49]"),
                   "dtype": (x.to(other), f"a {str(other)[6:]} tensor of shape [50]"),
                   "string": ("a string", "a str"), "list": (x.tolist(), "a list")}[damage]
    blob["state"]["x"] = value
    forge(path, blob)
    assert refused_resume(tmp_path / "r", capsys) == [
        f"p2pfl: error: --resume: {path}: x is {kind} where this run has a {str(x.dtype)[6:]} tensor of shape [50] "
        "(a checkpoint of another run?)"]


def test_a_deeply_nested_peer_file_is_refused_naming_it(tmp_path: Path, capsys) -> None:
    assert main([*CONSENSUS, "--rounds", "2", "--out", str(tmp_path), "--name", "r"]) == 0
    path = tmp_path / "r" / "checkpoint" / "peer-00003.r000002.pt"
    blob = torch.load(path, weights_only=True)
    blob["state"]["x"] = nested(3000)
    forge(path, blob)
    assert refused_resume(tmp_path / "r", capsys) == [
        f"p2pfl: error: --resume: {path} is not a p2pfl checkpoint (containers nested deeper than 64 levels)"]


def test_a_checkpoint_without_digests_resumes_with_a_warning(tmp_path: Path, capsys) -> None:
    """A checkpoint of an older p2pfl (no digests in its state file) resumes, exactly, after one warning line."""
    args = [*CONSENSUS, "--out", str(tmp_path)]
    assert main([*args, "--rounds", "2", "--name", "old"]) == 0
    state_file = tmp_path / "old" / "checkpoint" / "state.json"
    state = json.loads(state_file.read_text())
    del state["sha256"]
    state_file.write_text(json.dumps(state))
    capsys.readouterr()
    assert main([*args, "--rounds", "3", "--resume", str(tmp_path / "old")]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == [f"p2pfl: warning: --resume: {state_file} records no digests of its peer files (written by "
                        "an older p2pfl): they are resumed without a check for damage"]
    assert main([*args, "--rounds", "3", "--name", "whole"]) == 0
    rounds = [[r for r in _numbers(tmp_path / run) if r["type"] == "round"] for run in ("old", "whole")]
    assert [r["round"] for r in rounds[0]] == [0, 1, 2, 3] and rounds[0] == rounds[1]


@pytest.mark.mpi
def test_every_rank_checks_its_share_of_the_digests(runs_dir: Path) -> None:
    """Under mpirun -n 2 the state file holds both ranks' digests; a peer file damaged in rank 1's share is refused
    on resume: one line, exit 2, the folder unchanged."""
    args = ["-m", "p2pfl.run", *CONSENSUS, "--out", str(runs_dir)]
    job = run_job([*args, "--rounds", "2", "--name", "r"], ranks=2, timeout=180)
    assert job.returncode == 0, job.stderr[-2000:]
    folder = runs_dir / "r" / "checkpoint"
    state = json.loads((folder / "state.json").read_text())
    assert state["sha256"] == {str(p): sha256(folder / f"peer-{p:05d}.r000002.pt") for p in range(4)}
    path = folder / "peer-00003.r000002.pt"  # 3 % 2: checked by rank 1
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 1
    path.write_bytes(bytes(raw))
    before = snapshot(runs_dir / "r")
    job = run_job([*args, "--rounds", "3", "--resume", str(runs_dir / "r")], ranks=2, timeout=180)
    assert job.returncode == 2, job.stderr[-2000:]
    assert job.stderr.strip().splitlines() == [
        f"p2pfl: error: --resume: {path} does not match the sha256 digest that checkpoint/state.json records for it "
        "(damaged or changed after it was written)"]
    assert snapshot(runs_dir / "r") == before


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


# ------------------------------------------------- another rank count under the default peer batching: to rounding
BATCHED = ["-m", "p2pfl.run", "--algorithm", "fedavg", "--peers", "4", "--topology", "cycle", "--dataset", "synthetic",
           "--train-subset", "400", "--batch-size", "16", "--local-steps", "5", "--eval-every", "1", "--no-progress",
           "--no-plots", "--checkpoint-every", "1", "--dtype", "float64"]  # --batch-peers auto: a rank's peers stacked
#: The bound of a float64 value of BATCHED's run on two placements: rounds x local steps x the longest sum of a
#: step (a conv weight's gradient sums batch x 32 x 32 = 16384 products) x u = 2^-53, relative. The peers a rank
#: stacks change with the rank count, and a stacked kernel sums in another order than one peer's.
ROUNDING = 3 * 5 * 16 * 32 * 32 * 2.0 ** -53


@pytest.mark.mpi
@pytest.mark.numerics
def test_resume_on_another_rank_count_under_peer_batching_is_equal_to_rounding(runs_dir: Path) -> None:
    full = run_job([*BATCHED, "--rounds", "3", "--out", str(runs_dir), "--name", "full"], ranks=0)
    assert full.returncode == 0, full.stderr[-2000:]
    part = run_job([*BATCHED, "--rounds", "2", "--out", str(runs_dir), "--name", "part"], ranks=4)
    assert part.returncode == 0, part.stderr[-2000:]
    resumed = run_job([*BATCHED, "--rounds", "3", "--resume", str(runs_dir / "part")], ranks=2)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    full_records, resumed_records = _numbers(runs_dir / "full"), _numbers(runs_dir / "part")
    kept = [r for r in full_records if r["type"] == "round"] + [r for r in full_records if r["type"] == "eval"][-1:]
    again = ([r for r in resumed_records if r["type"] == "round"]
             + [r for r in resumed_records if r["type"] == "eval"][-1:])
    assert [r["round"] for r in again] == [0, 1, 2, 3, 3]
    moved = [0.0]

    def close(one: object, other: object, where: tuple) -> None:
        if isinstance(one, dict):
            assert isinstance(other, dict) and one.keys() == other.keys(), where
            for key in one:
                close(one[key], other[key], (*where, key))
        elif isinstance(one, list):
            assert isinstance(other, list) and len(one) == len(other), where
            for i, (a, b) in enumerate(zip(one, other)):
                close(a, b, (*where, i))
        elif isinstance(one, float):
            assert isinstance(other, float) and abs(other - one) <= ROUNDING * abs(one), (where, one, other)
            moved[0] = max(moved[0], abs(other - one))
        else:
            assert other == one, where

    for one, other in zip(kept, again, strict=True):
        close(one, other, (one["type"], one["round"]))
    assert moved[0] < 1e-9  # they moved apart at all only by rounding (0 where the kernels sum alike)
