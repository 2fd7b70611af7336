"""The borders between the project's packages (docs/CONVENTIONS.md): analysis reads run folders without torch and
draws without p2pfl's run importing it (the post-run hook); a method's capabilities are declared once, inherited,
and taken away with the reason the run gives."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from p2pfl.capabilities import ASYNCHRONOUS, BATCHABLE
from p2pfl.method import Algorithm
from p2pfl.runtime import hooks

from conftest import ROOT

#: analysis's modules that read and tabulate (no drawing, no tidy tables).
READERS = ("analysis", "analysis.runs", "analysis.delta", "analysis.hooks", "analysis.study", "analysis.report",
           "analysis.target", "analysis.frontier", "analysis.muscle", "analysis.metric_panels")


def test_analysis_reads_without_torch_or_matplotlib() -> None:
    code = (f"import importlib, sys; [importlib.import_module(m) for m in {READERS!r}]; "
            "heavy = [m for m in ('torch', 'matplotlib', 'pandas') if m in sys.modules]; print(heavy)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"


def test_p2pfl_imports_analysis_only_in_simulate() -> None:
    """p2pfl reaches analysis through the post-run hook; `simulate` alone reads its run back as an analysis Run,
    importing the reader inside the call."""
    found = []
    for path in sorted((ROOT / "p2pfl").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        top = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if any(n == "analysis" or n.startswith("analysis.") for n in names):
                found.append((path.relative_to(ROOT).as_posix(), id(node) in top))
    assert all(not at_top for _, at_top in found), found
    assert {where for where, _ in found} <= {"p2pfl/simulation.py"}, found


def test_post_run_hooks_follow_the_option_of_their_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hooks, "_HOOKS", {})
    monkeypatch.setattr(hooks, "HOOK_MODULES", ())
    seen: list[tuple[str, Path]] = []

    @hooks.after_run("plots")
    def plots(run_dir: Path) -> None:
        seen.append(("plots", run_dir))

    @hooks.after_run("always")
    def always(run_dir: Path) -> None:
        seen.append(("always", run_dir))

    class Cfg:
        plots = False

    assert hooks.run_hooks(tmp_path, Cfg()) == ["always"]
    Cfg.plots = True
    assert hooks.run_hooks(tmp_path, Cfg()) == ["plots", "always"]
    assert seen == [("always", tmp_path), ("plots", tmp_path), ("always", tmp_path)]
    with pytest.raises(ValueError, match="post-run hook 'plots' is already registered"):
        hooks.after_run("plots")(lambda run_dir: None)


def test_analysis_registers_the_plots_hook() -> None:
    assert "plots" in hooks.hooks()
    assert hooks.hooks()["plots"].__module__ == "analysis.hooks"


def test_capabilities_are_inherited_and_taken_away_with_a_reason() -> None:
    class Mixing(Algorithm):
        capabilities = frozenset({ASYNCHRONOUS})

    class Stacked(Mixing):
        capabilities = frozenset({BATCHABLE})

    class Odd(Stacked):
        lacks = {BATCHABLE: "its loss keeps per-step state"}

    class Again(Odd):
        capabilities = frozenset({BATCHABLE})

    assert not Algorithm.can(ASYNCHRONOUS) and Algorithm.why_not(ASYNCHRONOUS)
    assert Mixing.can(ASYNCHRONOUS) and not Mixing.can(BATCHABLE)
    assert Stacked.capabilities == {ASYNCHRONOUS, BATCHABLE} and BATCHABLE not in Stacked.lacks
    assert Odd.capabilities == {ASYNCHRONOUS} and Odd.why_not(BATCHABLE) == "its loss keeps per-step state"
    assert Again.can(BATCHABLE) and Stacked.can(BATCHABLE)  # a subclass's lack leaves its base alone


def test_the_built_in_methods_capabilities() -> None:
    """What the methods declared as flags before the capabilities (asynchronous, batchable), unchanged."""
    from p2pfl import algorithms

    def capable(capability: str) -> set[str]:
        return {n for n in algorithms.names() if algorithms.get(n).can(capability)}

    assert capable(ASYNCHRONOUS) >= {"dec-ssl", "dec-simsiam", "dec-mae", "dec-sl", "consensus", "fedavg", "fedprox"}
    assert not capable(ASYNCHRONOUS) & {"dec-byol", "dec-featarc", "local", "fedmuscle", "quadratic", "moon",
                                        "scaffold", "solo"}
    assert capable(BATCHABLE) >= {"dec-ssl", "dec-sl", "local", "moon", "fedavg", "fedprox", "solo"}
    assert not capable(BATCHABLE) & {"dec-simsiam", "dec-byol", "dec-featarc", "dec-mae", "fedmuscle", "consensus",
                                     "quadratic", "scaffold"}
    assert algorithms.get("dec-byol").why_not(ASYNCHRONOUS) == ("its target momentum follows the rounds, which "
                                                                "async does not count")
