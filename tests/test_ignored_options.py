"""Options a run was given but does not read are warned about, each with why (p2pfl.ignored), and the warning is
true: the option, when flagged, changes nothing in the run; when not flagged, it does."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import p2pfl
from p2pfl.cli import parse_args
from p2pfl.config import make_config

from conftest import timing_free_records

#: (command line, the options it must flag as ignored) — who reads what, written here by hand.
CASES = [
    (["--algorithm", "fedavg", "--mu", "1"], ["mu"]),
    (["--algorithm", "fedprox", "--mu", "1"], []),  # fedprox borrows moon's mu
    (["--algorithm", "moon", "--mu", "1", "--temperature", "0.3", "--prev-models", "2"], []),
    (["--algorithm", "fedavg", "--temperature", "0.3", "--prev-models", "2"], ["temperature", "prev_models"]),
    (["--algorithm", "dec-ssl", "--temperature", "0.3", "--proj-dim", "64"], []),
    (["--algorithm", "dec-simsiam", "--temperature", "0.3", "--proj-dim", "64"], ["temperature"]),
    (["--algorithm", "dec-byol", "--temperature", "0.3", "--byol-tau", "0.9"], ["temperature"]),
    (["--algorithm", "dec-ssl", "--byol-tau", "0.9", "--mask-ratio", "0.5"], ["byol_tau", "mask_ratio"]),
    (["--algorithm", "fedavg", "--probe-epochs", "3", "--knn-k", "5"], ["probe_epochs", "knn_k"]),
    (["--algorithm", "dec-sl", "--probe-epochs", "3"], []),
    (["--algorithm", "consensus", "--lr", "0.1", "--batch-size", "8", "--vector-size", "10"], ["lr", "batch_size"]),
    (["--algorithm", "consensus", "--partition", "iid", "--alpha", "0.5"], ["partition", "alpha"]),
    (["--algorithm", "quadratic", "--lr", "0.1", "--local-steps", "2", "--batch-size", "8"], ["batch_size"]),
    (["--algorithm", "fedavg", "--partition", "iid", "--alpha", "0.5"], ["alpha"]),
    (["--algorithm", "fedavg", "--partition", "dirichlet", "--alpha", "0.5"], []),
    (["--algorithm", "fedavg", "--partition", "shard", "--shards-per-peer", "2", "--classes-per-peer", "2"],
     ["classes_per_peer"]),
    (["--algorithm", "consensus", "--compress", "top-k", "--compress-ratio", "0.2", "--qsgd-levels", "8"],
     ["qsgd_levels"]),
    (["--algorithm", "fedavg", "--dataset", "synthetic", "--test-split", "0.2"], ["test_split"]),
]


@pytest.mark.parametrize("argv,flagged", CASES)
def test_flags_exactly_the_options_the_run_does_not_read(argv: list[str], flagged: list[str]) -> None:
    cfg, _ = parse_args(argv)
    named = [line.split(" ", 1)[0][2:].replace("-", "_") for line in cfg.ignored]
    assert sorted(named) == sorted(flagged), cfg.ignored
    assert all(line.count("\n") == 0 and " is ignored: " in line for line in cfg.ignored)


def test_the_message_names_who_reads_it() -> None:
    cfg = make_config(algorithm="fedavg", mu=1.0)
    assert cfg.ignored == ("--mu is ignored: it is an option of moon and fedprox, and --algorithm fedavg does not "
                           "read it",)
    cfg = make_config(algorithm="fedavg", partition="iid", alpha=0.5)
    assert cfg.ignored == ("--alpha is ignored: it is an option of partition dirichlet, and --partition is iid",)


def test_defaults_and_the_methods_own_values_are_never_flagged() -> None:
    for algorithm in ("fedavg", "moon", "dec-ssl", "dec-byol", "consensus", "quadratic", "fedmuscle"):
        assert make_config(algorithm=algorithm).ignored == ()


def _run(tmp_path: Path, name: str, **options) -> Path:
    base = dict(peers=4, rounds=2, eval_every=1, plots=False, progress=False, seed=3, out=str(tmp_path))
    run = p2pfl.simulate(**{**base, **options}, name=name)
    return Path(run.path)


@pytest.mark.parametrize("method,extra,changing", [
    (dict(algorithm="consensus", vector_size=64), dict(lr=0.5, batch_size=8, partition="iid"), dict(vector_size=32)),
    (dict(algorithm="fedavg", dataset="synthetic", partition="iid", local_steps=2, batch_size=16, lr=0.05),
     dict(mu=1.0, temperature=0.3, knn_k=3), dict(lr=0.1)),
])
def test_an_ignored_option_changes_nothing_and_a_read_one_does(tmp_path: Path, capsys, method: dict, extra: dict,
                                                                 changing: dict) -> None:
    plain = _run(tmp_path, "plain", **method)
    ignoring = _run(tmp_path, "ignoring", **method, **extra)
    assert timing_free_records(ignoring) == timing_free_records(plain)
    manifest = json.loads((ignoring / "manifest.json").read_text())
    assert sorted(line.split(" ", 1)[0] for line in manifest["ignored_options"]) == sorted(
        f"--{k.replace('_', '-')}" for k in extra)
    assert json.loads((plain / "manifest.json").read_text())["ignored_options"] == []
    out = capsys.readouterr().err  # warnings go to stderr (p2pfl.runtime.console)
    assert all(f"p2pfl: warning: {line}" in out for line in manifest["ignored_options"])
    changed = _run(tmp_path, "changed", **{**method, **changing})
    assert timing_free_records(changed) != timing_free_records(plain)
