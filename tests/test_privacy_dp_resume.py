"""DP-SGD resumes exactly (issue 45): a peer's DP steps are part of its checkpoint (`Peer.dp_steps`, saved once set),
so a run stopped and resumed has the uninterrupted run's noise draws, models and ε per peer per round, bit for bit,
on the per-peer and the peer-stacked path, and on another number of ranks; a --dp-epsilon run resumed to other
--rounds than its σ was solved for is refused in one line; runs without DP write the checkpoints they always wrote."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from test_checkpoint import _stop_after
from test_privacy_dp_sgd import reference_epsilon

from p2pfl.run import main
from p2pfl.runtime.checkpoint import WHEN_SET, record_state, restore_record
from p2pfl.runtime.preemption import PREEMPTED_EXIT

from conftest import run_job, timing_free_records

TINY = ["--algorithm", "fedavg", "--model", "mlp", "--dataset", "synthetic", "--peers", "3", "--rounds", "3",
        "--topology", "cycle", "--train-subset", "96", "--batch-size", "8", "--local-steps", "2", "--eval-every", "0",
        "--keep-optimizer", "--no-progress", "--no-plots", "--dp-clip", "1.0", "--dp-delta", "1e-5"]


def _peer_states(run_dir: Path) -> dict[str, dict]:
    """Every peer file of the run's checkpoint, by name, as saved (read without running code)."""
    return {p.name: torch.load(p, weights_only=True)["state"] for p in sorted((run_dir / "checkpoint").glob("*.pt"))}


@pytest.mark.parametrize("noise", [["--dp-noise", "1.1"], ["--dp-epsilon", "4.0"]], ids=["noise", "epsilon"])
@pytest.mark.parametrize("batch_peers", ["on", "off"])
def test_a_stopped_dp_run_resumes_to_the_uninterrupted_runs_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   noise: list[str], batch_peers: str) -> None:
    args = [*TINY, *noise, "--batch-peers", batch_peers, "--out", str(tmp_path)]
    _stop_after(monkeypatch, 1)
    with pytest.raises(SystemExit) as stopped:
        main([*args, "--name", "stopped"])
    assert stopped.value.code == PREEMPTED_EXIT
    monkeypatch.undo()
    states = _peer_states(tmp_path / "stopped")
    assert len(states) == 3 and all(s["dp_steps"] == 1 * 2 for s in states.values())  # round 1's 2 steps each
    assert main([*args, "--resume", str(tmp_path / "stopped")]) == 0
    assert main([*args, "--name", "whole"]) == 0
    resumed, whole = timing_free_records(tmp_path / "stopped"), timing_free_records(tmp_path / "whole")
    assert [r["round"] for r in resumed if r["type"] == "round"] == [0, 1, 2, 3]
    assert resumed == whole
    manifest = json.loads((tmp_path / "whole" / "manifest.json").read_text())
    sizes = manifest["partition"]["sizes"]
    last = [r for r in resumed if r["type"] == "round"][-1]
    for p, n in enumerate(sizes):  # after the resume, each peer's ε composes all 3 rounds' steps, not 1 round's
        sigma = manifest["dp_sgd"]["peers"][str(p)]["sigma"]
        assert last["dp_epsilon"][str(p)] == pytest.approx(reference_epsilon(sigma, 8 / n, 3 * 2, 1e-5), rel=1e-9)


@pytest.mark.mpi
def test_a_dp_run_continued_on_two_ranks_equals_the_longer_run(tmp_path: Path) -> None:
    """A --dp-noise run of 2 rounds, continued to 3 on 2 ranks, equals the 3-round run on one process (its rounds and
    final evaluation; the shorter run also evaluated at its own end)."""
    base = ["-m", "p2pfl.run", *TINY, "--dp-noise", "1.1", "--checkpoint-every", "1", "--out", str(tmp_path)]
    for rounds, name in (("3", "whole"), ("2", "part")):
        proc = run_job([*base, "--rounds", rounds, "--name", name], ranks=0)
        assert proc.returncode == 0, proc.stderr[-2000:]
    proc = run_job([*base, "--rounds", "3", "--resume", str(tmp_path / "part")], ranks=2)
    assert proc.returncode == 0, proc.stderr[-2000:]
    part, whole = timing_free_records(tmp_path / "part"), timing_free_records(tmp_path / "whole")
    assert [r for r in part if r["type"] == "round"] == [r for r in whole if r["type"] == "round"]
    assert [r for r in part if r["type"] == "eval"][-1] == [r for r in whole if r["type"] == "eval"][-1]


def test_a_target_epsilon_run_resumed_to_other_rounds_is_refused_in_one_line(tmp_path: Path,
                                                                              capsys: pytest.CaptureFixture) -> None:
    args = [*TINY, "--dp-epsilon", "4.0", "--checkpoint-every", "1", "--rounds", "2", "--out", str(tmp_path)]
    assert main([*args, "--name", "run"]) == 0
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()}
    with pytest.raises(SystemExit) as refused:
        main([*args[:-4], "--rounds", "4", "--resume", str(tmp_path / "run")])
    assert refused.value.code != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--rounds" in err[0] and "solved to spend it over its 2 rounds" in err[0]
    assert {p.name: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()} == before  # untouched


def test_a_run_without_dp_saves_no_step_count(tmp_path: Path) -> None:
    plain = [a for a in TINY if not a.startswith("--dp") and a not in ("1.0", "1e-5")]
    assert main([*plain, "--checkpoint-every", "1", "--out", str(tmp_path), "--name", "plain"]) == 0
    states = _peer_states(tmp_path / "plain")
    assert states and not any("dp_steps" in s for s in states.values())


@dataclass
class _Record:
    weights: torch.Tensor
    count: int = field(default=0, metadata={WHEN_SET: True})


def test_a_when_set_field_is_saved_once_set_and_restores_its_default_when_absent() -> None:
    fresh = _Record(torch.zeros(2))
    assert set(record_state(fresh)) == {"weights"}
    used = _Record(torch.ones(2), count=5)
    assert record_state(used)["count"] == 5
    target = _Record(torch.zeros(2), count=9)
    restore_record(target, record_state(used), torch.device("cpu"))
    assert target.count == 5 and torch.equal(target.weights, torch.ones(2))
    old = _Record(torch.zeros(2), count=0)
    restore_record(old, {"weights": torch.ones(2)}, torch.device("cpu"))  # a checkpoint from before the field
    assert old.count == 0
