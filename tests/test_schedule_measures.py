"""The measures of a per-round schedule (p2pfl.network.schedule_measures): the product of one period's W for a
topology that repeats, against products written here from the topologies' definitions; the empirical consensus rate
otherwise, against a brute-force run of the rounds (teleport's hand-over included); both in the manifest."""
from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from test_teleport import metropolis

import topologies
from p2pfl.network import NetworkSchedule
from p2pfl.network.schedule_measures import COLUMNS, schedule_measures
from topologies.streams import stream_seed

from conftest import run_job


def schedule(kind: str, n: int, seed: int = 2, **params) -> NetworkSchedule:
    return NetworkSchedule(n, seed=seed, dynamic=topologies.DYNAMIC[kind].bind(**params))


def shift(n: int, h: int) -> np.ndarray:
    """S with (S x)_i = x_(i+h mod n)."""
    return np.roll(np.eye(n), h, axis=1)


def exponential_product(n: int, k: int) -> tuple[np.ndarray, int]:
    """The k-peer exponential graph's period product, written from its definition: round t averages each peer with
    i + 2^h for the k hops h = (t−1)k … (t−1)k + k − 1 mod τ, 1/(k + 1) each; the period τ / gcd(τ, k)."""
    tau = int(np.ceil(np.log2(n)))
    period = tau // np.gcd(tau, k)
    p = np.eye(n)
    for t in range(1, period + 1):
        hops = [2 ** (((t - 1) * k + r) % tau) for r in range(k)]
        p = (np.eye(n) + sum(shift(n, h) for h in hops)) / (k + 1) @ p
    return p, period


@pytest.mark.parametrize(("n", "k"), [(24, 1), (16, 1), (16, 2), (20, 3)])
def test_the_exponential_period_product_is_the_one_written_here(n: int, k: int) -> None:
    p, period = exponential_product(n, k)
    moduli = np.sort(np.abs(np.linalg.eigvals(p)))[::-1]
    got = schedule_measures(schedule("k-peer-exponential", n, fanout=k), 10, 0.951)["period_product"]
    assert got["rounds"] == period
    lam2 = moduli[1] if moduli[1] > 1e-12 else 0.0
    assert got["lambda2"] == pytest.approx(lam2, abs=1e-12)
    assert got["spectral_gap"] == pytest.approx(1 - lam2, abs=1e-12)
    assert got["rate"] == pytest.approx(lam2 ** (1 / period), abs=1e-12)
    assert (got["n_eff"] is None) == (not np.allclose(p, p.T, atol=1e-9))
    if n == 16 and k == 1:  # 2^4 peers: exact after 4 rounds (Ying et al.), gap 1, rate 0, n_eff = K
        assert (got["lambda2"], got["rate"]) == (0.0, 0.0)
        assert got["n_eff"] == pytest.approx(16.0, rel=1e-9)
    if n == 24:  # not a power of two: never exact
        assert got["lambda2"] > 0.1


@pytest.mark.parametrize(("n", "k", "period"), [(24, 1, 6), (24, 2, 4), (100, 4, 3)])
def test_base_periods_product_is_exactly_the_average(n: int, k: int, period: int) -> None:
    """Base-(k+1): P = J, so |λ2(P)| = 0 (to rounding), gap 1, rate 0 and n_eff(J) = K at any γ."""
    got = schedule_measures(schedule("base", n, max_degree=k), 50, 0.951)["period_product"]
    assert got == {"rounds": period, "lambda2": 0.0, "spectral_gap": 1.0, "n_eff": pytest.approx(n, rel=1e-9),
                   "rate": 0.0}


def test_teleport_consensus_rate_is_the_brute_force_run_of_its_rounds() -> None:
    """No period: ρ = (‖X_R − mean‖ / ‖X_0 − mean‖)^(1/R), X moved by each round's hand-over, then mixed by
    Metropolis on the cycle of slots among the round's holders; X_0 from the stream (seed, SHARED, consensus-rate)."""
    n, k, seed, rounds = 10, 4, 6, 7
    x = np.random.default_rng(stream_seed(seed, -1, "consensus-rate")).standard_normal((n, COLUMNS))
    start = np.linalg.norm(x - x.mean(axis=0))
    w = metropolis(nx.cycle_graph(k))
    before = None
    for t in range(1, rounds + 1):
        now = np.random.default_rng(stream_seed(seed, -1, f"teleport/{t}")).choice(n, size=k, replace=False)
        if before is not None:
            x[now] = x[before]
        x[now] = w @ x[now]
        before = now
    want = (np.linalg.norm(x - x.mean(axis=0)) / start) ** (1 / rounds)
    got = schedule_measures(schedule("teleport", n, seed=seed, active=k), rounds, 0.951)
    assert got == {"consensus_rate": {"rate": pytest.approx(want, rel=1e-12), "rounds": rounds, "columns": COLUMNS}}
    assert 0 < want < 1


def test_a_lossy_periodic_schedule_is_measured_by_its_rate_and_a_static_one_not_at_all() -> None:
    lossy = NetworkSchedule(24, seed=1, dynamic=topologies.DYNAMIC["base"].bind(max_degree=1), link_failure=0.2)
    assert set(schedule_measures(lossy, 12, 0.951)) == {"consensus_rate"}
    static = NetworkSchedule(8, graph=topologies.build("cycle", 8))
    assert schedule_measures(static, 12, 0.951) == {}


def test_the_manifest_records_them(tmp_path: Path) -> None:
    args = ["-m", "p2pfl.run", "--algorithm", "consensus", "--peers", "12", "--vector-size", "4", "--rounds", "2",
            "--eval-every", "0", "--no-progress", "--no-plots", "--topology", "base", "--max-degree", "1", "--out",
            str(tmp_path), "--name", "r"]
    proc = run_job(args, ranks=0)
    assert proc.returncode == 0, proc.stderr[-2000:]
    stats = json.loads((tmp_path / "r" / "manifest.json").read_text())["topology"]["stats"]
    assert stats["period_product"]["rounds"] == json.loads((tmp_path / "r" / "manifest.json").read_text())[
        "network"]["exact_consensus_round"]
    assert stats["period_product"]["spectral_gap"] == 1.0 and "consensus_rate" not in stats
