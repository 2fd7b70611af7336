"""FedMuscle's comparison made fair (issue 14): the M each peer really used is recorded, the temperatures are
options that every loss can share and the manifest records, gamma = 0 reproduces the pairwise loss in a run, and
the cosine between the Muscle and pairwise anchor gradients is logged."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from p2pfl.config import ConfigError, make_config, resolve
from p2pfl.losses import muscle_loss_naive, pairwise_infonce
from p2pfl.losses.align import align_temperatures, anchor_gradient_cosine

from test_fedmuscle import _job, _records

SPEC = {"public": {"dataset": "synthetic", "options": {"seed": 1}, "size": 100},
        "groups": [{"count": 5, "model": "simple-cnn", "task": "synthetic"}]}
COMMON = ["--rounds", "2", "--local-steps", "1", "--batch-size", "16", "--train-subset", "400",
          "--contrastive-steps", "2", "--public-batch", "8", "--rep-dim", "16", "--eval-every", "0"]


def _spec(tmp_path: Path) -> str:
    from test_peerspec import write_yaml
    return str(write_yaml(tmp_path / "spec.yaml", SPEC))


def _per_peer(run: Path, key: str) -> list[dict[str, float]]:
    """Per round (1, 2, ...), the peers' values of `key` in the round records."""
    rounds = [r for r in _records(run) if r["type"] == "round" and r["round"] >= 1]
    return [dict(r.get(key) or {}) for r in rounds]


# ------------------------------------------------------------------------------------------------ pieces

def test_temperatures_resolve_to_the_references_or_the_matched_value() -> None:
    assert align_temperatures("muscle") == {"tau": 0.2, "tau_prev": 0.15}
    assert align_temperatures("pairwise") == {"tau": 0.2}
    assert align_temperatures("gram") == {"tau": 0.07}
    assert align_temperatures("gram", 0.3) == {"tau": 0.3}
    matched = align_temperatures("muscle", 0.4)
    assert matched["tau"] == 0.4 and matched["tau_prev"] == pytest.approx(0.3)  # the reference ratio 0.75
    assert align_temperatures("muscle", 0.4, 0.4) == {"tau": 0.4, "tau_prev": 0.4}
    with pytest.raises(ValueError, match="unknown value 'nce'"):
        align_temperatures("nce")


def test_bad_tau_prev_is_one_clear_line() -> None:
    with pytest.raises(ConfigError, match=r"--muscle-tau-prev: must lie in \(0, 0.2\]"):
        resolve(make_config(algorithm="fedmuscle", dataset="synthetic", peers=4, muscle_tau_prev=0.3), 1)
    with pytest.raises(ConfigError, match="--align-tau: must be > 0"):
        resolve(make_config(algorithm="fedmuscle", dataset="synthetic", peers=4, align_tau=0.0), 1)


@pytest.mark.numerics
@pytest.mark.parametrize("m", [1, 2, 3])
def test_gradient_cosine_against_brute_force(m: int) -> None:
    """The logged cosine equals the one from the enumerated Muscle loss's gradient (float64, an independent
    implementation); with gamma = 0 it is 1."""
    g = torch.Generator().manual_seed(m)
    anchor = torch.nn.functional.normalize(torch.randn(6, 5, generator=g, dtype=torch.float64), dim=1)
    others = torch.nn.functional.normalize(torch.randn(m, 6, 5, generator=g, dtype=torch.float64), dim=2)
    grads = []
    for loss in (lambda a: muscle_loss_naive(a, others, 0.2, 0.15), lambda a: pairwise_infonce(a, others, 0.2)):
        a = anchor.clone().requires_grad_(True)
        (gr,) = torch.autograd.grad(loss(a), a)
        grads.append(gr.flatten())
    expected = float(torch.nn.functional.cosine_similarity(grads[0], grads[1], dim=0))
    got = anchor_gradient_cosine(anchor, others, "muscle")
    assert got == pytest.approx(expected, abs=1e-9)
    given = anchor_gradient_cosine(anchor, others, "muscle", grad=grads[0].view_as(anchor))  # the training's gradient
    assert given == pytest.approx(expected, abs=1e-9)
    if m == 1:
        assert got == pytest.approx(1.0, abs=1e-9)  # one other: Muscle is InfoNCE
    assert anchor_gradient_cosine(anchor, others, "muscle", tau=0.2, tau_prev=0.2) == pytest.approx(1.0, abs=1e-9)


# ------------------------------------------------------------------------------------------------ runs

@pytest.mark.parametrize("topology,m,expected", [("cycle", 3, 2.0), ("complete", 3, 3.0), ("complete", 6, 4.0)])
def test_recorded_m_is_min_of_m_and_degree(tmp_path: Path, topology: str, m: int, expected: float) -> None:
    run = _job(tmp_path, "m", 0, "--algorithm", "fedmuscle", "--peers-spec", _spec(tmp_path), "--topology", topology,
               "--muscle-m", str(m), *COMMON)
    rounds = _per_peer(run, "muscle_m")
    assert len(rounds) == 2 and all(sorted(r) == [str(p) for p in range(5)] for r in rounds)
    assert {v for r in rounds for v in r.values()} == {expected}


@pytest.mark.numerics
def test_gamma_zero_run_is_the_pairwise_run(tmp_path: Path) -> None:
    """--muscle-tau-prev equal to the temperature (gamma = 0) trains as --loss pairwise: the same alignment
    losses and task metrics up to float rounding, and the anchor gradients point the same way (cosine 1). The
    manifest records the temperatures each run used."""
    args = ["--algorithm", "fedmuscle", "--peers-spec", _spec(tmp_path), "--topology", "complete", "--muscle-m", "3",
            "--align-tau", "0.3", *COMMON, "--eval-every", "2"]
    muscle = _job(tmp_path, "muscle", 0, *args, "--muscle-tau-prev", "0.3")
    pairwise = _job(tmp_path, "pairwise", 0, *args, "--loss", "pairwise")
    lm, lp = _per_peer(muscle, "muscle_loss"), _per_peer(pairwise, "muscle_loss")
    assert [sorted(r) for r in lm] == [sorted(r) for r in lp] and lm[0]
    for rm, rp in zip(lm, lp):
        for p in rp:
            assert rm[p] == pytest.approx(rp[p], rel=1e-5)
    cosines = _per_peer(muscle, "grad_cos_pairwise")
    assert all(v == pytest.approx(1.0, abs=1e-5) for r in cosines for v in r.values()) and cosines[0]
    assert not any(_per_peer(pairwise, "grad_cos_pairwise"))  # pairwise against itself is not logged
    em = [r for r in _records(muscle) if r["type"] == "eval"][-1]["per_peer"]
    ep = [r for r in _records(pairwise) if r["type"] == "eval"][-1]["per_peer"]
    for p in ep:
        assert em[p]["task_metric"] == pytest.approx(ep[p]["task_metric"], abs=1e-3)
    align = json.loads((muscle / "manifest.json").read_text())["alignment"]
    assert align["tau"] == 0.3 and align["tau_prev"] == 0.3 and align["gram_tau"] == 0.3 and align["matched"]


def test_default_temperatures_and_the_cosine_of_a_real_muscle_run(tmp_path: Path) -> None:
    """At the reference temperatures (gamma = 5/3, M = 3 on a complete graph) the Muscle gradient is logged
    every round, a cosine in [-1, 1], and the manifest says the temperatures were not matched."""
    run = _job(tmp_path, "muscle", 0, "--algorithm", "fedmuscle", "--peers-spec", _spec(tmp_path),
               "--topology", "complete", "--muscle-m", "3", *COMMON)
    cosines = _per_peer(run, "grad_cos_pairwise")
    values = [v for r in cosines for v in r.values()]
    assert len(values) == 10 and all(-1.0 <= v <= 1.0 + 1e-9 for v in values)
    align = json.loads((run / "manifest.json").read_text())["alignment"]
    assert (align["tau"], align["tau_prev"], align["gram_tau"], align["matched"]) == (0.2, 0.15, 0.07, False)
