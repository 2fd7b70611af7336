"""--resume continues the run it names and nothing else: options other than those that only continue or observe
it are refused naming every difference, a refused resume leaves the folder byte for byte as it was, and one run
at a time writes a folder (a second writer is refused)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from p2pfl.run import main
from p2pfl.runner import Runner

from conftest import ROOT

BASE = ["--algorithm", "consensus", "--peers", "4", "--vector-size", "20", "--topology", "cycle", "--eval-every",
        "0", "--no-progress", "--no-plots", "--checkpoint-every", "1"]


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under root with its bytes, but the lock file (it names the process that last held it)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def _run(tmp_path: Path, rounds: int = 2) -> Path:
    assert main([*BASE, "--rounds", str(rounds), "--out", str(tmp_path), "--name", "r"]) == 0
    return tmp_path / "r"


def _refused(args: list[str], capsys) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_resume_with_other_options_is_refused_naming_each_and_the_folder_is_unchanged(tmp_path: Path,
                                                                                        capsys) -> None:
    run = _run(tmp_path)
    before = _tree(run)
    line = _refused([*BASE, "--rounds", "4", "--topology", "star", "--seed", "1", "--vector-size", "30",
                     "--resume", str(run)], capsys)
    assert line == (f"p2pfl: error: --resume {run}: differs from the run's own options: --topology cycle (run) vs "
                    "star (now), --seed 0 vs 1, --vector-size 20 vs 30")
    assert _tree(run) == before


@pytest.mark.parametrize("other", [["--peers", "5"], ["--algorithm", "quadratic"], ["--mixing", "uniform"]])
def test_a_refused_resume_leaves_config_and_manifest_byte_identical(tmp_path: Path, capsys, other: list[str]) -> None:
    run = _run(tmp_path)
    before = _tree(run)
    line = _refused([*BASE, "--rounds", "3", *other, "--resume", str(run)], capsys)
    assert line.startswith(f"p2pfl: error: --resume {run}: differs from the run's own options: {other[0]} ")
    assert _tree(run) == before


def test_a_resume_refused_by_its_checkpoint_writes_nothing(tmp_path: Path, capsys) -> None:
    """A check that needs the method built (its checkpoint restored) fails after set-up: the folder's config.yaml,
    manifest.json and metrics.jsonl are still the run's own (a resume would record `resume:` in config.yaml)."""
    run = _run(tmp_path)
    (run / "checkpoint" / "peer-00002.r000002.pt").unlink()
    before = _tree(run)
    line = _refused([*BASE, "--rounds", "3", "--resume", str(run)], capsys)
    assert "peer-00002.r000002.pt is missing" in line
    assert _tree(run) == before


def test_options_that_continue_or_observe_the_run_may_change(tmp_path: Path) -> None:
    run = _run(tmp_path)
    assert main([*BASE, "--rounds", "3", "--timeout", "60", "--checkpoint-every", "2", "--eval-every", "1",
                 "--resume", str(run)]) == 0
    config = (run / "config.yaml").read_text()
    assert "rounds: 3\n" in config and f"resume: {run}\n" in config and "eval_every: 1\n" in config


def test_a_second_writer_is_refused_while_a_run_writes_the_folder(tmp_path: Path, monkeypatch) -> None:
    """While a resumed run is in its rounds, a second --resume of the same folder (another process) is refused
    with one line and exit 2; the first run ends normally with every round recorded once."""
    run = _run(tmp_path)
    original, seen = Runner._round, {}

    def round_with_a_rival(self: Runner, t: int) -> dict:
        if t == 3:
            seen["rival"] = subprocess.run(
                [sys.executable, "-m", "p2pfl.run", *BASE, "--rounds", "6", "--resume", str(run)],
                capture_output=True, text=True, timeout=120, cwd=ROOT, env={"PYTHONPATH": str(ROOT),
                                                                           "OMP_NUM_THREADS": "1", "PATH": ""})
            seen["metrics"] = (run / "metrics.jsonl").read_bytes()
        return original(self, t)

    monkeypatch.setattr(Runner, "_round", round_with_a_rival)
    assert main([*BASE, "--rounds", "4", "--resume", str(run)]) == 0
    rival = seen["rival"]
    assert rival.returncode == 2, rival.stderr[-2000:]
    lines = rival.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"p2pfl: error: --resume: {run} is being written by another "
                                                   "run"), lines
    assert seen["metrics"].count(b'"type": "round"') == 3  # rounds 0-2: the rival cut nothing
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records if r["type"] == "round"] == [0, 1, 2, 3, 4]
    assert "rounds: 4\n" in (run / "config.yaml").read_text()
