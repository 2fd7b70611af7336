"""Imports and objects by need: `import p2pfl.run` loads no plotting, and peers trained peer-stacked never build
the per-peer `torch.optim` optimisers they do not step (the first of which imports torch._dynamo)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from p2pfl.algorithms.peer import Peer

from conftest import ROOT
from helpers_inproc import setup_algorithm

SMALL = {"algorithm": "fedavg", "peers": 4, "train_subset": 256, "batch_size": 16, "local_steps": 3,
         "optimizer": "sgd", "lr": 0.05}


def _modules_after(code: str) -> set[str]:
    """The heavy modules loaded after `code` in a fresh interpreter."""
    probe = (f"import sys\n{code}\n"
             "print(sorted(m for m in ('matplotlib', 'torch._dynamo') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return set(eval(proc.stdout.strip().splitlines()[-1]))


def test_import_p2pfl_run_loads_no_matplotlib() -> None:
    """Nothing of matplotlib (nor torch._dynamo) before a plot is drawn; asking for the drawing loads it."""
    assert _modules_after("import p2pfl.run") == set()
    assert "matplotlib" in _modules_after("import p2pfl.run, topologies; topologies.draw")


def _round(algo, t: int) -> None:
    net = algo.ctx.schedule.at(t)
    algo.local_updates(sorted(algo.peers), t, net)
    algo.communicate(t, net)


def _built(algo) -> list[bool]:
    return [Peer.__dict__["optimizer"].built(peer) for _, peer in sorted(algo.peers.items())]


@pytest.mark.parametrize("batch_peers,keep,built", [("on", False, False), ("off", False, True), ("on", True, True)],
                         ids=["batched", "peer-by-peer", "batched-keep-optimizer"])
def test_per_peer_optimisers_are_built_only_where_used(tmp_path: Path, batch_peers: str, keep: bool,
                                                       built: bool) -> None:
    """Batched peers step with the stacked optimiser: their own optimisers stay unbuilt through set-up and
    rounds, unless --keep-optimizer carries state in them; peer by peer, each is built for its first step."""
    algo = setup_algorithm(tmp_path, batch_peers=batch_peers, keep_optimizer=keep, **SMALL)
    assert (algo.batched is not None) == (batch_peers == "on")
    assert _built(algo) == [False] * 4
    for t in (1, 2):
        _round(algo, t)
    assert _built(algo) == [built] * 4


def test_a_late_optimiser_is_the_one_set_up_would_have_built(tmp_path: Path) -> None:
    """Read after batched rounds, a peer's optimiser is --optimizer over its trainable parameters at the
    configured settings (what a checkpoint then saves)."""
    algo = setup_algorithm(tmp_path, batch_peers="on", momentum=0.9, weight_decay=1e-4, **SMALL)
    _round(algo, 1)
    for peer in algo.peers.values():
        opt = peer.optimizer
        assert type(opt).__name__ == "SGD" and not opt.state
        assert [p for g in opt.param_groups for p in g["params"]] == list(algo.trainable(peer.model))
        group = opt.param_groups[0]
        assert (group["lr"], group["momentum"], group["weight_decay"]) == (0.05, 0.9, 1e-4)
        assert peer.optimizer is opt


def test_a_batched_run_never_imports_torch_dynamo(tmp_path: Path) -> None:
    """A whole batched run (set-up, rounds, final evaluation) constructs no torch.optim optimiser: the import of
    torch._dynamo that the first one costs never happens."""
    argv = ["--algorithm", "fedavg", "--dataset", "synthetic", "--peers", "4", "--rounds", "2", "--local-steps", "2",
            "--batch-size", "16", "--train-subset", "256", "--optimizer", "sgd", "--batch-peers", "on", "--no-plots",
            "--no-progress", "--threads", "1", "--out", str(tmp_path), "--name", "r"]
    code = f"from p2pfl.run import main\nassert main({argv!r}) == 0"
    assert "torch._dynamo" not in _modules_after(code)
    assert (tmp_path / "r" / "summary.json").exists()
