"""--gossip muffliato's pairwise ledger (p2pfl.privacy.muffliato) against a brute force written here: peer v's view
as one linear Gaussian, built from the gossip matrices round by round and step by step (what v receives from each
neighbour at each step, as coefficients of every noise draw's noisy values; v's own columns dropped, since it knows
its own value and noise), and the exact Rényi divergence Δ²/(2σ²)·mᵀ(BBᵀ)⁺m per unit of α by a pseudo-inverse.
`single`: u's value enters with the first draw only (averaging; `--algorithm consensus`); `fresh`: u's value in
every draw moves by ±Δ, the worst signs (Muffliato-GD). The ledger is ≥ both (to float64 rounding), equal to the
exact under --muffliato-once, and ≤ J × `fresh` (J noise draws), the factor its docstring proves."""
from __future__ import annotations

import itertools
import math
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from test_privacy_f import metropolis

import p2pfl
from p2pfl.privacy.gaussian import epsilon_at
from p2pfl.privacy.muffliato import PairwiseLedger

from helpers_inproc import setup_algorithm

DELTA = 1e-5
ROUNDING = 1e-9  # relative: pseudo-inverses and projections in float64


def views(rounds: list[tuple[np.ndarray, np.ndarray]], steps: int, once: bool) -> tuple[list[np.ndarray], int]:
    """Per observer v, B_v: one row per (step, neighbour w) of what v receives, as coefficients of the stacked
    noisy values (draw t, peer j) → column t·K + j; v's own columns zeroed. `rounds`: each round's (W, hears)."""
    n = rounds[0][0].shape[0]
    draws = 1 if once else len(rounds)
    state = np.zeros((n, draws * n))  # row i: peer i's current value in the stacked noisy values
    rows: list[list[np.ndarray]] = [[] for _ in range(n)]
    for r, (W, hears) in enumerate(rounds):
        if r < draws:
            state[:, r * n:(r + 1) * n] += np.eye(n)  # the peers add draw r's c + η
        for _ in range(steps):
            for v in range(n):
                for w in range(n):
                    if w != v and hears[v, w]:
                        row = state[w].copy()
                        row[v::n] = 0.0
                        rows[v].append(row)
            state = W @ state
    return [np.array(r) if r else np.zeros((0, draws * n)) for r in rows], draws


def exact(rounds: list[tuple[np.ndarray, np.ndarray]], steps: int, once: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """(single, fresh, J): the exact ρ_{u→v} / (Δ²/(2σ²)) of u's first-draw value and of its worst ±1 moves in
    every draw."""
    B, draws = views(rounds, steps, once)
    n = len(B)
    single, fresh = np.zeros((n, n)), np.zeros((n, n))
    for v in range(n):
        if B[v].shape[0] == 0:
            continue
        inverse = np.linalg.pinv(B[v] @ B[v].T, rcond=1e-12, hermitian=True)
        for u in range(n):
            if u == v:
                continue
            columns = B[v][:, u::n]  # b_t, t = 1..J
            gram = columns.T @ inverse @ columns
            single[u, v] = gram[0, 0]
            fresh[u, v] = max(s @ gram @ s for s in map(np.array, itertools.product((1.0, -1.0), repeat=draws)))
    return single, fresh, draws


def ledger_rho(rounds: list[tuple[np.ndarray, np.ndarray]], steps: int, once: bool, **kw) -> np.ndarray:
    ledger = PairwiseLedger(rounds[0][0].shape[0], 1.0, **kw)
    for r, (W, hears) in enumerate(rounds):
        if not once or r == 0:
            ledger.inject()
        for _ in range(steps):
            ledger.step(W, hears)
    return ledger.rho


GRAPHS = {
    "cycle8": nx.cycle_graph(8),
    "star": nx.star_graph(6),
    "binary-tree": nx.balanced_tree(2, 3),
    "gnp10": nx.gnp_random_graph(10, 0.4, seed=7),
}


def check_bounds(got: np.ndarray, single: np.ndarray, fresh: np.ndarray, draws: int | None) -> None:
    """got ≥ single and fresh on every ordered pair; ≤ draws × fresh where fresh > 0 (no factor if None)."""
    off = ~np.eye(got.shape[0], dtype=bool)
    assert np.all(got[off] >= single[off] * (1 - ROUNDING) - ROUNDING)
    assert np.all(got[off] >= fresh[off] * (1 - ROUNDING) - ROUNDING)
    if draws is None:
        return
    positive = off & (fresh > ROUNDING)
    assert np.all(got[positive] <= draws * fresh[positive] * (1 + ROUNDING))
    assert np.all(got[off & (fresh <= ROUNDING)] <= ROUNDING)  # nothing observed, nothing charged


@pytest.mark.parametrize("graph", GRAPHS)
@pytest.mark.parametrize("once, rounds, steps", [(True, 5, 1), (True, 3, 2), (False, 6, 1), (False, 3, 2)])
def test_ledger_bounds_the_exact_view(graph: str, once: bool, rounds: int, steps: int) -> None:
    """On each graph, noise once or every round, 1 or 2 gossip steps a round: the ledger ≥ the exact ρ of the
    averaging value and of fresh values every round, on every ordered pair; ≤ J × the latter; equal to the exact
    under --muffliato-once (J = 1)."""
    g = GRAPHS[graph]
    net = (metropolis(g), nx.to_numpy_array(g) > 0)
    single, fresh, draws = exact([net] * rounds, steps, once)
    got = ledger_rho([net] * rounds, steps, once)
    check_bounds(got, single, fresh, draws)
    if once:
        np.testing.assert_allclose(got, single, rtol=1e-7, atol=1e-10)
    if not once:  # later noise masks the averaging value: the network amplifies (so the test is not all local DP)
        off = ~np.eye(g.number_of_nodes(), dtype=bool)
        assert single[off].min() < 0.5 * single[off].max()


def test_fallback_is_the_count_of_draws_that_reached() -> None:
    """Past its size limit the ledger charges local DP's ρ per draw that reached v: still ≥ the exact (no factor:
    the network's amplification is given up)."""
    g = GRAPHS["cycle8"]
    net = (metropolis(g), nx.to_numpy_array(g) > 0)
    single, fresh, _ = exact([net] * 4, 1, False)
    ledger = PairwiseLedger(8, 1.0, dense_limit=0)
    for _ in range(4):
        ledger.inject()
        ledger.step(*net)
    assert ledger.mode == "reach"
    check_bounds(ledger.rho, single, fresh, None)
    hops = dict(nx.all_pairs_shortest_path_length(g))
    want = np.array([[0 if u == v else max(0, 4 - (hops[u][v] - 1)) for v in range(8)] for u in range(8)])
    np.testing.assert_array_equal(ledger.rho, want)  # draw t reaches v after hops − 1 more steps


def test_fallback_retires_the_draws_that_reached_everyone() -> None:
    """In `reach` the draws that have reached every pair are counted and dropped: over 40 rounds of the cycle of 8
    (diameter 4) the ledger keeps at most diameter + 1 draws' supports, and its ρ is still the count of draws that
    reached v, R − (hops − 1) (every draw reaches every peer: it would be R at hop 1)."""
    g = GRAPHS["cycle8"]
    net = (metropolis(g), nx.to_numpy_array(g) > 0)
    ledger, rounds = PairwiseLedger(8, 1.0, dense_limit=0), 40
    for _ in range(rounds):
        ledger.inject()
        ledger.step(*net)
        assert len(ledger.products) <= nx.diameter(g) + 1
    hops = dict(nx.all_pairs_shortest_path_length(g))
    want = np.array([[0 if u == v else rounds - (hops[u][v] - 1) for v in range(8)] for u in range(8)])
    np.testing.assert_array_equal(ledger.rho, want)
    assert ledger.full == rounds - len(ledger.products)


def test_ledger_on_a_failing_network(tmp_path: Path) -> None:
    """Noise every round on a random graph whose links fail (the schedule's own W and links, read as input): the
    ledger kept by the scheme round by round bounds the brute force over those networks."""
    sigma, sensitivity, rounds = 0.5, 0.1, 4
    algo = setup_algorithm(tmp_path, algorithm="consensus", peers=7, topology="random", p=0.5, link_failure=0.3,
                           rounds=rounds, gossip_steps=2, vector_size=10, vector_dtype="float64",
                           gossip="muffliato", muffliato_noise=sigma, muffliato_sensitivity=sensitivity)
    scheme = algo.ctx.scheme
    nets = []
    for t in range(1, rounds + 1):
        net = algo.ctx.schedule.at(t)
        scheme.round_metrics(t, net)
        nets.append((net.W.toarray(), net.adjacency.toarray() != 0))
    assert len({a.tobytes() for _, a in nets}) > 1  # the rounds' links differ
    single, fresh, draws = exact(nets, 2, False)
    scale = sensitivity ** 2 / (2 * sigma ** 2)
    check_bounds(scheme.ledger.rho / scale, single, fresh, draws)


def test_once_run_records_the_exact_matrix(tmp_path: Path) -> None:
    """--muffliato-once on a chain of 6, 3 rounds of 2 steps, run end to end: the saved matrix is the exact (ε, δ)
    of the brute force; the records' max and mean and the by-distance summary are the matrix's."""
    sigma, sensitivity = 0.3, 0.1
    run = p2pfl.simulate(plots=False, progress=False, out=str(tmp_path), algorithm="consensus", peers=6,
                         topology="chain", rounds=3, gossip_steps=2, vector_size=20, vector_dtype="float64",
                         gossip="muffliato", muffliato_once=True, muffliato_noise=sigma,
                         muffliato_sensitivity=sensitivity)
    g = nx.path_graph(6)
    single, _, _ = exact([(metropolis(g), nx.to_numpy_array(g) > 0)] * 3, 2, True)
    scale = sensitivity ** 2 / (2 * sigma ** 2)
    want = epsilon_at(scale * single, DELTA)
    np.testing.assert_allclose(np.load(Path(run.path) / "muffliato_eps.npy"), want, rtol=1e-7, atol=1e-9)
    off = want[~np.eye(6, dtype=bool)]
    assert run.rounds[-1]["muffliato_eps_max"] == pytest.approx(off.max(), rel=1e-7)
    assert run.rounds[-1]["muffliato_eps_mean"] == pytest.approx(off.mean(), rel=1e-7)
    assert run.summary["muffliato_ledger"] == "exact"
    ldp = epsilon_at(scale, DELTA)
    assert run.summary["muffliato_ldp_eps"] == pytest.approx(ldp, rel=1e-12)
    by_distance = {d: (mean, top) for d, mean, top in run.summary["muffliato_eps_by_distance"]}
    for d in range(1, 6):
        at_d = [want[u, v] for u in range(6) for v in range(6) if abs(u - v) == d]
        assert by_distance[d] == pytest.approx((np.mean(at_d), np.max(at_d)), rel=1e-7)


def test_issue_57_reproduction_is_bounded(tmp_path: Path) -> None:
    """The issue's run (consensus, cycle of 8, 6 rounds of 1 step, noise every round, σ = 0.3, Δ = 0.5): the
    exact (ε, δ = 1e-5) of the averaging value, by distance, is 2.86 / 1.14 / 0.65 at 2 / 3 / 4 hops (the brute
    force, checked against the issue's numbers); the old ledger said 0 there; the recorded ε is at least it on every
    pair and at least the exact of fresh values every round."""
    sigma, sensitivity = 0.3, 0.5
    run = p2pfl.simulate(plots=False, progress=False, out=str(tmp_path), algorithm="consensus", topology="cycle",
                         peers=8, rounds=6, gossip="muffliato", muffliato_noise=sigma,
                         muffliato_sensitivity=sensitivity, vector_size=6, vector_dtype="float64", eval_every=0)
    g = nx.cycle_graph(8)
    single, fresh, _ = exact([(metropolis(g), nx.to_numpy_array(g) > 0)] * 6, 1, False)
    scale = sensitivity ** 2 / (2 * sigma ** 2)
    exact_eps = epsilon_at(scale * single, DELTA)
    hops = dict(nx.all_pairs_shortest_path_length(g))
    at = {d: np.mean([exact_eps[u, v] for u in range(8) for v in range(8) if hops[u][v] == d]) for d in (2, 3, 4)}
    assert [round(at[d], 2) for d in (2, 3, 4)] == [2.86, 1.14, 0.65]
    got = np.load(Path(run.path) / "muffliato_eps.npy")
    off = ~np.eye(8, dtype=bool)
    assert np.all(got[off] >= exact_eps[off] * (1 - ROUNDING))
    assert np.all(got[off] >= epsilon_at(scale * fresh, DELTA)[off] * (1 - ROUNDING))
    by_distance = {d: mean for d, mean, _ in run.summary["muffliato_eps_by_distance"]}
    assert all(by_distance[d] >= at[d] for d in (2, 3, 4))
    assert run.summary["muffliato_eps_max"] == pytest.approx(epsilon_at(6 * scale, DELTA), rel=1e-12)
    assert math.isclose(run.summary["muffliato_ldp_eps"], run.summary["muffliato_eps_max"], rel_tol=1e-12)
