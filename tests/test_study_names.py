"""A study writes only inside its folder under --out: its name is one folder name, and --dry-run (with --slurm
too) writes nothing at all."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from p2pfl.study.__main__ import main as study_main

TINY = {"algorithm": "consensus", "vector_size": 20, "rounds": 1, "peers": 4, "eval_every": 0, "plots": False}


def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("name", ["..", "."])
def test_a_study_named_dot_dot_is_refused_and_writes_nothing(tmp_path: Path, capsys, name: str) -> None:
    out = tmp_path / "parent" / "studies"
    out.mkdir(parents=True)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": name, "base": TINY, "axes": {"seed": [0]}}))
    before = _tree(tmp_path)
    capsys.readouterr()
    assert study_main([str(path), "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"p2pfl.study: error: name: '{name}' is not a folder name; give one folder name (no '/', not '.' or '..')"]
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("started", [False, True])
def test_slurm_dry_run_changes_nothing(tmp_path: Path, capsys, started: bool) -> None:
    """--slurm --dry-run prints the sbatch command and leaves every file as it was, for a new study and for one
    whose folder exists (a point added to its file since)."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "s", "base": TINY, "axes": {"seed": [0]}}))
    out = tmp_path / "studies"
    if started:
        assert study_main([str(path), "--out", str(out)]) == 0
        path.write_text(yaml.safe_dump({"name": "s", "base": TINY, "axes": {"seed": [0, 1]}}))
    before = _tree(tmp_path)
    capsys.readouterr()
    assert study_main([str(path), "--out", str(out), "--slurm", "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("sbatch --parsable --array=0-0%16 --job-name=p2pfl-s")
    assert _tree(tmp_path) == before
