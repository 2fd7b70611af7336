"""ζ² at the network average (p2pfl.heterogeneity, SPEC §10): on the quadratic problem against the closed form from
A and b along this file's own dense D-PSGD trace; on learning methods finite, placement-free (1 vs 2 ranks) and
off with --zeta2-batch 0; the chunked gradient against one full-batch backward."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from p2pfl.heterogeneity import gradient

from conftest import run_job

K, D, LR, ROUNDS = 4, 3, 0.1, 6


def _evals(run_dir: Path) -> dict[int, dict]:
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["round"]: r["metrics"] for r in lines if r["type"] == "eval"}


def _quadratic(runs_dir: Path, name: str, problem: Path, *extra: str, ranks: int = 0) -> Path:
    proc = run_job(["-m", "p2pfl.run", "--algorithm", "quadratic", "--peers", str(K), "--rounds", str(ROUNDS),
                    "--problem", str(problem), "--lr", str(LR), "--topology", "cycle", "--eval-every", "2",
                    "--out", str(runs_dir), "--name", name, "--no-progress", "--no-plots", *extra], ranks=ranks)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return runs_dir / name


def _problem_file(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    A = rng.standard_normal((K, D, D)) * 0.5 + np.eye(D)
    b = rng.standard_normal((K, D)) * np.arange(1, K + 1)[:, None]
    path = tmp_path / "problem.npz"
    np.savez(path, A=A, b=b)
    return path, A, b


def _dense_zeta2(A: np.ndarray, b: np.ndarray) -> dict[int, float]:
    """D-PSGD X⁺ = W (X − η ∇F(X)) from X₀ = 1 on the ring of 4 (Metropolis: 1/3 each), and at every round
    ζ² = (1/K) Σ_i ‖A_iᵀ(A_i x̄ − b_i) − mean_j A_jᵀ(A_j x̄ − b_j)‖², x̄ the peers' mean."""
    W = np.zeros((K, K))
    for i in range(K):
        for j in (i - 1, i, i + 1):
            W[i, j % K] = 1 / 3
    X = np.ones((K, D))
    out = {}
    for t in range(1, ROUNDS + 1):
        G = np.stack([A[i].T @ (A[i] @ X[i] - b[i]) for i in range(K)])
        X = W @ (X - LR * G)
        xbar = X.mean(axis=0)
        g = np.stack([A[i].T @ (A[i] @ xbar - b[i]) for i in range(K)])
        out[t] = float(((g - g.mean(axis=0)) ** 2).sum(axis=1).mean())
    return out


@pytest.mark.numerics
def test_quadratic_zeta2_is_the_closed_form(runs_dir: Path, tmp_path: Path) -> None:
    path, A, b = _problem_file(tmp_path)
    expected = _dense_zeta2(A, b)
    evals = _evals(_quadratic(runs_dir, "q", path))
    assert set(evals) == {2, 4, 6}
    for t, metrics in evals.items():
        assert metrics["zeta2_avg"] == pytest.approx(expected[t], rel=1e-10)
    assert expected[2] != pytest.approx(expected[6], rel=1e-3)  # the test sees x̄ move


@pytest.mark.numerics
def test_generated_quadratic_zeta2_is_the_closed_form(runs_dir: Path, tmp_path: Path) -> None:
    """The generated problem (A_i = (i + 1)/√K I kept as scalars, b_i from the stream (0, i, "quadratic")) against
    the dense closed form of the same A_i and b_i."""
    import math

    from p2pfl.seeding import numpy_rng
    A = np.stack([(i + 1) / math.sqrt(K) * np.eye(D) for i in range(K)])
    b = np.stack([numpy_rng(0, i, "quadratic").standard_normal(D) / (i + 1) for i in range(K)])
    proc = run_job(["-m", "p2pfl.run", "--algorithm", "quadratic", "--peers", str(K), "--rounds", str(ROUNDS),
                    "--dim", str(D), "--lr", str(LR), "--topology", "cycle", "--eval-every", "2", "--out",
                    str(runs_dir), "--name", "gen", "--no-progress", "--no-plots"], ranks=0)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = _dense_zeta2(A, b)
    for t, metrics in _evals(runs_dir / "gen").items():
        assert metrics["zeta2_avg"] == pytest.approx(expected[t], rel=1e-10)


def test_zeta2_batch_zero_turns_it_off(runs_dir: Path, tmp_path: Path) -> None:
    path, _, _ = _problem_file(tmp_path)
    evals = _evals(_quadratic(runs_dir, "off", path, "--zeta2-batch", "0"))
    assert evals and all("zeta2_avg" not in m for m in evals.values())


@pytest.mark.mpi
def test_quadratic_zeta2_same_on_one_and_two_ranks(runs_dir: Path, tmp_path: Path) -> None:
    path, _, _ = _problem_file(tmp_path)
    one = _evals(_quadratic(runs_dir, "one", path, ranks=1))
    two = _evals(_quadratic(runs_dir, "two", path, ranks=2))
    assert {t: m["zeta2_avg"] for t, m in one.items()} == {t: m["zeta2_avg"] for t, m in two.items()}


LEARN = ["-m", "p2pfl.run", "--dataset", "synthetic", "--peers", "4", "--topology", "cycle", "--optimizer", "sgd",
         "--lr", "0.05", "--batch-size", "16", "--train-subset", "256", "--alpha", "0.5", "--local-steps", "2",
         "--rounds", "2", "--eval-every", "1", "--zeta2-batch", "40", "--batch-peers", "off", "--probe-epochs", "1",
         "--threads", "1", "--no-progress", "--no-plots"]


def _learn(runs_dir: Path, name: str, algorithm: str, ranks: int) -> dict[int, dict]:
    proc = run_job([*LEARN, "--algorithm", algorithm, "--out", str(runs_dir), "--name", name], ranks=ranks)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return _evals(runs_dir / name)


@pytest.mark.numerics
@pytest.mark.mpi
def test_learner_zeta2_same_on_one_and_two_ranks(runs_dir: Path) -> None:
    """Dec-SL: ζ² at every evaluation, finite and positive (non-IID shards), equal on 1 and 2 ranks to rounding."""
    one = _learn(runs_dir, "one", "dec-sl", 1)
    two = _learn(runs_dir, "two", "dec-sl", 2)
    assert set(one) == {1, 2}
    for t in one:
        assert 0.0 < one[t]["zeta2_avg"] < float("inf")
        assert two[t]["zeta2_avg"] == pytest.approx(one[t]["zeta2_avg"], rel=1e-9)


def test_fedavg_measures_and_ssl_does_not(runs_dir: Path) -> None:
    fedavg = _learn(runs_dir, "fedavg", "fedavg", 0)
    assert all(0.0 < m["zeta2_avg"] < float("inf") for m in fedavg.values())
    ssl = _learn(runs_dir, "ssl", "dec-ssl", 0)
    assert ssl and all("zeta2_avg" not in m for m in ssl.values())  # its loss needs random views


@pytest.mark.numerics
def test_chunked_gradient_equals_one_backward() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    x, y = torch.randn(10, 5), torch.randint(0, 3, (10,))
    loss = lambda m, xs, ys: F.cross_entropy(m(xs), ys)  # noqa: E731
    whole = torch.autograd.grad(loss(model, x, y), list(model.parameters()))
    expected = torch.cat([g.reshape(-1) for g in whole]).double()
    assert torch.allclose(gradient(model, loss, x, y, chunk=3), expected, rtol=1e-5, atol=1e-7)
    assert all(p.grad is None for p in model.parameters())


def test_unset_zeta2_batch_measures_the_final_evaluation_only(tmp_path: Path) -> None:
    """--zeta2-batch unset: a learner's ζ² at the final evaluation alone, the value --zeta2-batch 512 gives there."""
    from helpers_inproc import setup_algorithm

    small = {"algorithm": "fedavg", "peers": 4, "topology": "cycle", "local_steps": 2, "batch_size": 16,
             "train_subset": 256, "batch_peers": "off"}
    got = {}
    for name, extra in (("unset", {}), ("asked", {"zeta2_batch": 512})):
        algo = setup_algorithm(tmp_path / name, **small, **extra)
        net = algo.ctx.schedule.at(1)
        algo.local_updates(sorted(algo.peers), 1, net)
        algo.communicate(1, net)
        got[name] = [algo.evaluate(1, final, net)[0].get("zeta2_avg") for final in (False, True)]
    assert got["unset"][0] is None and got["asked"][0] is not None
    assert got["unset"][1] == got["asked"][1] > 0.0
