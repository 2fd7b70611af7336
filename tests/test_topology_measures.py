"""SPEC §10's topology measures (topologies.measures, p2pfl.network.mixing_measures) against computations written
here: brute-force eigenvalues for p, the Gaussian expectation of the contraction, and Vogels et al. 2022's
published n_eff values."""
from __future__ import annotations

import numpy as np
import pytest

import topologies
from p2pfl.network import NetworkSchedule
from p2pfl.network.mixing_measures import STATIC_RULE, changes, mixing_measures
from topologies.measures import contraction, expected_contraction, n_eff, p_worst


def _w(name: str, k: int, mixing: str = "metropolis") -> np.ndarray:
    return topologies.mixing_matrix(topologies.build(name, k), mixing)


def _p_by_eigenvalues(w: np.ndarray) -> float:
    """Koloskova et al.'s 1 − max(|λ2|, |λ_K|)², eigenvalues sorted descending (λ1 = 1)."""
    lam = np.sort(np.linalg.eigvalsh(w))[::-1]
    return 1.0 - max(abs(lam[1]), abs(lam[-1])) ** 2


@pytest.mark.parametrize("name,k,mixing", [("cycle", 16, "metropolis"), ("cycle", 7, "max-degree"),
                                           ("star", 9, "metropolis"), ("binary-tree", 15, "metropolis"),
                                           ("complete", 6, "metropolis")])
def test_p_matches_brute_force_eigenvalues(name, k, mixing):
    w = _w(name, k, mixing)
    assert p_worst(w) == pytest.approx(_p_by_eigenvalues(w), abs=1e-12)


def test_p_is_the_worst_case_over_x():
    """No X contracts by less than 1 − p_worst; the eigenvector of λ2 attains it."""
    w = _w("cycle", 10)
    rng = np.random.default_rng(0)
    worst = 1.0 - p_worst(w)
    assert max(contraction(w, rng.standard_normal((10, 3))) for _ in range(200)) <= worst + 1e-12
    lam, q = np.linalg.eigh(w)
    second = q[:, np.argsort(-np.abs(lam))[1]][:, None]
    assert contraction(w, second) == pytest.approx(worst, rel=1e-10)


def test_expected_contraction_is_the_gaussian_mean():
    """E ratio over Gaussian X = ‖W − J‖_F²/(K − 1) = mean of λ_i² over i ≥ 2 for a symmetric W, for any number of
    columns (checked by Monte Carlo at 1 column, where the ratio is not concentrated)."""
    for w in (_w("cycle", 8), _w("star", 6), _w("star", 6, "uniform")):
        k = len(w)
        rng = np.random.default_rng(1)
        mc = np.mean([contraction(w, rng.standard_normal((k, 1))) for _ in range(40000)])
        assert mc == pytest.approx(expected_contraction(w), rel=0.02)
    w = _w("cycle", 8)
    lam = np.sort(np.abs(np.linalg.eigvalsh(w)))[::-1]
    assert expected_contraction(w) == pytest.approx(np.mean(lam[1:] ** 2), rel=1e-12)
    assert 1.0 - expected_contraction(w) >= p_worst(w)  # an average contracts more than the worst case


@pytest.mark.parametrize("name,k,expected", [("cycle", 16, 8.59), ("cycle", 32, 8.86), ("star", 32, 2.31),
                                             ("complete", 32, 32.0)])
def test_n_eff_reference_values(name, k, expected):
    """Vogels et al. 2022's values with the default γ = 0.951, all with Metropolis weights (1/3 on the ring, 1/K
    on the star's spokes, 1/K everywhere on the complete graph)."""
    assert round(n_eff(_w(name, k)), 2) == expected


def test_n_eff_by_its_definition_and_none_for_one_way_weights():
    w = _w("binary-tree", 7)
    gamma = 0.8
    lam, q = np.linalg.eigh(w)
    sigma = q @ np.diag(lam ** 2 / (1 - gamma * lam ** 2)) @ q.T
    assert n_eff(w, gamma) == pytest.approx(1 / ((1 - gamma) * np.trace(sigma) / 7), rel=1e-12)
    assert n_eff(_w("star", 6, "uniform")) is None  # row-stochastic only: no orthogonal decomposition


def test_manifest_statistics_carry_the_measures():
    w = _w("cycle", 16)
    stats = topologies.statistics(topologies.build("cycle", 16), w, gamma=0.5)
    assert stats["p"] == stats["p_worst"] == pytest.approx(_p_by_eigenvalues(w))
    assert stats["p_source"] == "closed form"
    assert stats["n_eff"] == pytest.approx(n_eff(w, 0.5)) and stats["n_eff_gamma"] == 0.5


def test_changing_network_measures_are_means_over_its_rounds_and_deterministic():
    """p_mean of a changing network is exactly 1 − the mean of ‖W_t − J‖_F²/(K − 1) over its rounds (no random X);
    failures lower both p and p_mean below the static W's (bounds: float64 rounding of 40-term means of values ≤ 1)."""
    graph = topologies.build("cycle", 12)
    static = NetworkSchedule(12, 3, graph=graph)
    assert not changes(static) and mixing_measures(static, 20)["rule"] == STATIC_RULE
    failing = NetworkSchedule(12, 3, graph=graph, link_failure=0.3)
    got = mixing_measures(failing, 40)
    assert got["rounds"] == 40 and mixing_measures(failing, 40) == got
    exact = 1.0 - np.mean([expected_contraction(failing.at(t).W.toarray()) for t in range(1, 41)])
    assert got["p_mean"] == pytest.approx(exact, rel=0, abs=4 * (40 + 144) * np.finfo(float).eps)
    w = static.static_weights.toarray()
    assert got["p_mean"] < 1.0 - expected_contraction(w) and got["p"] < p_worst(w)  # failures slow the mixing


def test_fixed_network_measures_are_those_of_its_w():
    """A static W treated as changing (a crash in a far round): every round has the same W, so the mean over the
    rounds is W's own p_worst and 1 − expected contraction, exactly to rounding; the average exceeds the worst case."""
    graph = topologies.build("cycle", 10)
    sched = NetworkSchedule(10, 0, graph=graph, crashes={0: 10**6})
    assert changes(sched)
    got = mixing_measures(sched, 200)
    w = sched.static_weights.toarray()
    bound = 4 * 10 * (200 + 10) * np.finfo(float).eps
    assert got["p_mean"] == pytest.approx(1.0 - expected_contraction(w), rel=0, abs=bound)
    assert got["p"] == pytest.approx(p_worst(w), rel=0, abs=bound)
    assert got["p_mean"] > got["p"]
