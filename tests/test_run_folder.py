"""The run folder's files: strict JSON with non-finite numbers read back as floats, appends that leave no cut
line, the user's umask, a failed run's status, and run folder names that stay under --out."""
from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import p2pfl.runtime.files as files
import p2pfl.runtime.heap as heap
from analysis.frames import frame
from analysis.runs import load_run
from p2pfl.config import make_config
from p2pfl.run import main
from p2pfl.runtime.files import JsonLines, write_atomic
from p2pfl.runtime.runfolder import RunFolder

from conftest import ROOT

CONSENSUS = ["--algorithm", "consensus", "--peers", "4", "--vector-size", "20", "--rounds", "2", "--eval-every",
             "0", "--no-progress", "--no-plots"]


def _strict(text: str) -> object:
    """json.loads that refuses NaN, Infinity and -Infinity, as strict JSON readers do."""
    def refuse(word: str) -> None:
        raise ValueError(f"not JSON: {word}")
    return json.loads(text, parse_constant=refuse)


def test_non_finite_numbers_are_strict_json_and_read_back_as_floats(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "r", make_config(algorithm="consensus", peers=2, out=str(tmp_path)))
    folder.log({"type": "round", "round": 1, "elapsed_s": 0.1, "loss": {"0": math.nan, "1": np.float32("inf")},
                "loss_mean": math.nan, "consensus_distance": -math.inf, "bytes_sent": 0, "bytes_recv": 0})
    folder.write_summary({"final": {"a": math.nan, "b": [math.inf, -math.inf, 1.5]}, "wall_s": 1.0})
    folder.close()
    for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines():
        _strict(line)
    _strict((tmp_path / "r" / "summary.json").read_text())
    run = load_run(tmp_path / "r")
    record = run.rounds[0]
    assert math.isnan(record["loss"]["0"]) and record["loss"]["1"] == math.inf
    assert math.isnan(record["loss_mean"]) and record["consensus_distance"] == -math.inf
    assert math.isnan(run.summary["final"]["a"]) and run.summary["final"]["b"] == [math.inf, -math.inf, 1.5]


def test_older_files_with_bare_nan_still_read(tmp_path: Path) -> None:
    RunFolder(tmp_path / "r", make_config(algorithm="consensus", peers=2, out=str(tmp_path))).close()
    (tmp_path / "r" / "metrics.jsonl").write_text('{"type": "round", "round": 0, "loss_mean": NaN, '
                                                  '"consensus_distance": Infinity}\n')
    record = load_run(tmp_path / "r").rounds[0]
    assert math.isnan(record["loss_mean"]) and record["consensus_distance"] == math.inf


@pytest.mark.parametrize("how", ["raises", "short"])
def test_a_failing_append_leaves_the_file_as_it_was(tmp_path: Path, monkeypatch, how: str) -> None:
    """The disk fills during an append: the write stores 7 bytes and then raises (or returns 7); the file keeps
    its complete lines only, and the next append after space is freed is a whole line."""
    log = JsonLines(tmp_path / "m.jsonl")
    log.write({"round": 0, "x": 1.0})
    before = (tmp_path / "m.jsonl").read_bytes()
    real_write = os.write

    def full_disk(fd: int, data: bytes) -> int:
        real_write(fd, data[:7])
        if how == "raises":
            raise OSError(28, "No space left on device")
        return 7

    monkeypatch.setattr(files.os, "write", full_disk)
    with pytest.raises(OSError):
        log.write({"round": 1, "x": 2.0})
    assert (tmp_path / "m.jsonl").read_bytes() == before
    monkeypatch.undo()
    log.write({"round": 2, "x": 3.0})
    log.close()
    assert [json.loads(line)["round"] for line in (tmp_path / "m.jsonl").read_text().splitlines()] == [0, 2]


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_files_honour_the_umask(tmp_path: Path, mask: int) -> None:
    old = os.umask(mask)
    try:
        write_atomic(tmp_path / "a.json", "{}")
        assert main([*CONSENSUS, "--out", str(tmp_path), "--name", "r"]) == 0
    finally:
        os.umask(old)
    expected = 0o666 & ~mask
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == expected
    for name in ("config.yaml", "manifest.json", "metrics.jsonl", "summary.json"):
        assert stat.S_IMODE((tmp_path / "r" / name).stat().st_mode) == expected, name


def test_every_folder_and_file_of_a_run_follows_the_umask(tmp_path: Path) -> None:
    """Under umask 027, everything a run with checkpoints, plots and both trackers creates (the trackers' own
    files included) is rwxr-x--- (folders) or rw-r----- (files): no mode is forced; --quiet says nothing."""
    pytest.importorskip("tensorboard")
    pytest.importorskip("wandb")
    # A process of its own, and a W&B service of its own (no WANDB_SERVICE, which an earlier wandb run in this
    # process leaves set for its children): that service writes the run's W&B files with the umask it started under.
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    proc = subprocess.run([sys.executable, "-m", "p2pfl.run", *CONSENSUS, "--plots", "--checkpoint-every", "1",
                           "--log", "tensorboard,wandb", "--quiet", "--out", str(tmp_path / "runs"), "--name", "r"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: os.umask(0o027))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == ""
    made = [p for p in (tmp_path / "runs").rglob("*") if not p.is_symlink()]
    kinds = {"plots", "tensorboard", "wandb", "checkpoint"}
    assert kinds <= {p.name for p in made if p.is_dir()} and any(p.suffix == ".png" for p in made)
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in made if p.is_dir()} == {oct(0o750)}
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in made if p.is_file()} == {oct(0o640)}


def test_a_run_failing_while_loading_data_reads_back_as_failed(tmp_path: Path, monkeypatch, capsys) -> None:
    def unreadable(**options: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("p2pfl.data.datasets.synthetic.synthetic_arrays", unreadable)
    with pytest.raises(SystemExit) as exit_:
        main(["--algorithm", "fedavg", "--dataset", "synthetic", "--peers", "2", "--rounds", "1", "--no-progress",
              "--no-plots", "--out", str(tmp_path), "--name", "r"])
    assert exit_.value.code == 1
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["reason"] == "OSError: [Errno 5] Input/output error"
    run = load_run(tmp_path / "r")
    assert run.state == "failed" and run.failure == "OSError: [Errno 5] Input/output error"
    assert frame(tmp_path / "r").runs["state"].tolist() == ["failed"]
    RunFolder(tmp_path / "live", make_config(algorithm="consensus", peers=2, out=str(tmp_path))).close()
    assert load_run(tmp_path / "live").state == "unfinished"


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("name", ["../x", "ABS", "a/b", "..", ".", "n" * 300])
def test_a_name_that_is_not_one_folder_is_refused(tmp_path: Path, capsys, name: str) -> None:
    out = tmp_path / "deep" / "out"
    out.mkdir(parents=True)
    name = str(tmp_path / "abs") if name == "ABS" else name
    before = _tree(tmp_path)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main([*CONSENSUS, "--out", str(out), "--name", name])
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("p2pfl: error: --name: "), lines
    if len(name) > 200:
        assert lines[0] == "p2pfl: error: --name: too long (300 characters); at most 200 allowed"
    assert _tree(tmp_path) == before


def test_records_reach_the_disk_before_the_checkpoint_that_names_their_round(tmp_path: Path, monkeypatch) -> None:
    """metrics.jsonl is synced when a checkpoint is about to name its round, before the summary and at the end,
    not once a record: every state.json written finds each record of the rounds it covers already synced, and
    summary.json every record."""
    import p2pfl.runner as runner

    synced: list[int] = []  # the metrics.jsonl lines on the disk after each fsync of it
    named: list[tuple[int, int]] = []  # (round a state file names, lines synced by then)
    real_fsync, real_save_state = os.fsync, runner.save_state
    metrics = tmp_path / "r" / "metrics.jsonl"

    def fsync(fd: int) -> None:
        real_fsync(fd)
        if os.path.exists(metrics) and os.path.samestat(os.fstat(fd), os.stat(metrics)):
            synced.append(len(metrics.read_text().splitlines()))

    def save_state(run_dir: Path, round: int, *args, **kwargs) -> None:
        named.append((round, synced[-1] if synced else 0))
        real_save_state(run_dir, round, *args, **kwargs)

    import p2pfl.runtime.runfolder as runfolder

    summarised: list[int] = []  # lines synced as summary.json is written
    real_write_json = runfolder.write_json

    def write_json(path: Path, obj: object) -> None:
        if Path(path).name == "summary.json":
            summarised.append(synced[-1] if synced else 0)
        real_write_json(path, obj)

    monkeypatch.setattr(files.os, "fsync", fsync)
    monkeypatch.setattr(runner, "save_state", save_state)
    monkeypatch.setattr(runfolder, "write_json", write_json)
    assert main([*CONSENSUS, "--rounds", "4", "--checkpoint-every", "2", "--out", str(tmp_path), "--name", "r"]) == 0
    lines = metrics.read_text().splitlines()
    assert [r for r, _ in named] == [2, 4]
    for round, on_disk in named:  # the round-0 record and one a round up to the named round (no evaluations)
        assert on_disk >= round + 1
    assert summarised == [len(lines)]  # a folder with a summary reads as ended: every record is on the disk first
    assert synced[-1] == len(lines)  # everything, at the end
    assert len(synced) <= 4  # two checkpoints, the summary and the close: not one a record


@pytest.mark.parametrize("peers", [heap.FREEZE_FROM - 1, heap.FREEZE_FROM])
def test_the_heap_is_frozen_for_the_rounds_from_enough_peers_only(peers: int) -> None:
    """The freeze (and the full collection before it) only where a process holds FREEZE_FROM peers or more; the
    heap is unfrozen after the block either way; a process that froze objects of its own is left as it was."""
    import gc

    before = gc.get_freeze_count()  # conftest froze the session's imports
    gc.unfreeze()
    try:
        with heap.frozen_heap(peers):
            assert (gc.get_freeze_count() > 0) == (peers >= heap.FREEZE_FROM)
        assert gc.get_freeze_count() == 0
        gc.freeze()  # a process that froze its own objects before is left as it is: no more, none less
        frozen = gc.get_freeze_count()
        with heap.frozen_heap(peers):
            assert gc.get_freeze_count() == frozen
        assert gc.get_freeze_count() == frozen > 0
    finally:
        gc.unfreeze()
        if before:
            gc.freeze()
