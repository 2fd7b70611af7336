"""The mixing measures of a run's network (p2pfl.network.mixing_measures, manifest stats["mixing"]; issue 56 item 1):
one definition per key for every network, against computations written here.

- a ring of 16 with link failures: each measure falls as failures slow the mixing, equals the definitions evaluated
  here on the very rounds the implementation used (W_t rebuilt here from the round's surviving links by Metropolis
  written here: float64 bounds), and the infinite-round closed form (expectations over the failures enumerated here)
  to a Monte Carlo tolerance (a bootstrap over the rounds used);
- static graphs: the closed forms of topologies.measures on W;
- above DENSE_MAX peers: the sparse path against the dense computation of the same rounds;
- the study report: its columns read stats["mixing"], and an old run folder's changing-network p becomes p_mean.

Tolerances: float64 rounding. An eigenvalue of a symmetric matrix built from N averaged K × K matrices of entries in
[−1, 1] moves by at most ‖ΔA‖₂ ≤ ‖ΔA‖_F (Weyl) under rounding errors ΔA of at most (N + K)·eps per entry (N-term sums,
K-term products), and LAPACK/ARPACK's backward-stable solvers add a small multiple of K·eps·‖A‖: hence
`eig_bound(K, N)` = 4·K·(N + K)·eps. A non-symmetric E[W]'s eigenvalues move by at most κ(V) times as much
(Bauer–Fike, V its eigenvectors, κ computed here).
"""
from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from analysis.report import main as report_main
from analysis.study import MEASURES
from p2pfl.cli import parse_args
from p2pfl.config import resolve
from p2pfl.network.mixing_measures import STATIC_RULE
from p2pfl.network.schedule_measures import round_operator
from p2pfl.run import build_network
from p2pfl.run import main as run_main
from topologies.measures import DENSE_MAX, expected_contraction, n_eff, p_worst
from topologies.stats import mixing_of, second_eigenvalue_modulus

EPS = float(np.finfo(np.float64).eps)
GAMMA = 0.951
RING = 16
#: Rounds of the ring runs: more than the 256 the measures sample, so the sampling rule is exercised.
RING_ROUNDS = 300
SAMPLED = 256
FAILURES = (0.0, 0.1, 0.3, 0.5)
#: Monte Carlo: standard errors allowed between the mean over the sampled rounds and its infinite-round limit, and
#: the bootstrap resamples that estimate them.
STANDARD_ERRORS = 4.0
BOOTSTRAP = 200
KEYS = ("spectral_gap", "p", "p_mean", "n_eff")


def eig_bound(k: int, n: int) -> float:
    """What float64 rounding may move an eigenvalue of a mean of n K × K matrices by (module docstring)."""
    return 4.0 * k * (n + k) * EPS


def n_eff_bound(k: int, n: int, gamma: float = GAMMA) -> float:
    """Relative rounding bound of n_eff = K / ((1 − γ) Σ_k g(λ_k)), g(λ) = λ²/(1 − γλ²): |g'| ≤ 2/(1 − γ)² on
    [−1, 1] and Σ g ≥ g(1) = 1/(1 − γ), so an eigenvalue error δ moves n_eff by at most 2K/(1 − γ)·δ relative."""
    return 2.0 * k / (1.0 - gamma) * eig_bound(k, n)


def config(*options: str, peers: int = RING, rounds: int = RING_ROUNDS, topology: str = "cycle"):
    """A resolved consensus run's configuration, as python -m p2pfl.run builds it."""
    return resolve(parse_args(["--algorithm", "consensus", "--peers", str(peers), "--rounds", str(rounds),
                               "--topology", topology, "--vector-size", "4", "--no-progress", "--no-plots",
                               *options])[0], 1).cfg


def metropolis(adjacency: np.ndarray) -> np.ndarray:
    """W_ij = 1/(1 + max(d_i, d_j)) on the links, the rest of each row on its diagonal (written here)."""
    deg = adjacency.sum(axis=1)
    w = np.where(adjacency > 0, 1.0 / (1.0 + np.maximum.outer(deg, deg)), 0.0)
    return w + np.diag(1.0 - w.sum(axis=1))


def sampled_rounds(rounds: int) -> list[int]:
    """1..R, or 256 of them evenly spaced (rounded; 299·i/255 is never a half, so the rounding is unambiguous)."""
    if rounds <= SAMPLED:
        return list(range(1, rounds + 1))
    return sorted({int(round(1 + i * (rounds - 1) / (SAMPLED - 1))) for i in range(SAMPLED)})


def centred_gram(w: np.ndarray) -> np.ndarray:
    """(W − J)ᵀ(W − J)."""
    c = w - 1.0 / len(w)
    return c.T @ c


def measures_of(ws: np.ndarray, grams: np.ndarray | None = None, gamma: float = GAMMA) -> dict[str, float | None]:
    """The four definitions, dense, over the rounds' matrices `ws` (N × K × K) taken with equal weight."""
    k = ws.shape[1]
    mean = ws.mean(axis=0)
    grams = np.stack([centred_gram(w) for w in ws]) if grams is None else grams
    moduli = np.sort(np.abs(np.linalg.eigvals(mean)))[::-1]
    lam = np.linalg.eigvalsh((mean + mean.T) / 2)
    symmetric = np.array_equal(mean, mean.T)
    return {"spectral_gap": 1.0 - moduli[1],
            "p": 1.0 - np.linalg.eigvalsh(grams.mean(axis=0)).max(),
            "p_mean": 1.0 - np.mean([((w - 1.0 / k) ** 2).sum() for w in ws]) / (k - 1),
            "n_eff": 1.0 / ((1.0 - gamma) * np.mean(lam ** 2 / (1.0 - gamma * lam ** 2))) if symmetric else None}


def ring_rounds(q: float) -> tuple[dict, np.ndarray]:
    """The manifest's stats["mixing"] of the ring at link failure q, and W_t of the rounds it sampled, rebuilt here
    by Metropolis on each round's surviving links (the schedule's draws)."""
    cfg = config("--link-failure", str(q))
    _, schedule, record = build_network(cfg)
    ws = np.stack([metropolis(schedule.at(t).adjacency.toarray()) for t in sampled_rounds(RING_ROUNDS)])
    return record["stats"]["mixing"], ws


def ring_limits(q: float, k: int = RING, gamma: float = GAMMA) -> dict[str, float]:
    """The measures over infinitely many rounds: E[W] and E[W²] of the ring with each link down with probability q
    and Metropolis weights recomputed on the surviving links (p2pfl.network.schedule: a link whose both neighbouring
    links failed carries 1/2, any other 1/3). Both are circulant (the failures are exchangeable around the ring);
    row i of W depends on links i−2..i+1 and row i of W² on links i−3..i+2 (link j joins j and j+1), so the six
    links' 64 states, enumerated with their probabilities, give the rows exactly."""
    i = k // 2
    window = [(i + d) % k for d in range(-3, 3)]
    row_w, row_w2 = np.zeros(k), np.zeros(k)
    for state in range(2 ** len(window)):
        up = np.ones(k, dtype=bool)
        for bit, link in enumerate(window):
            up[link] = bool(state >> bit & 1)
        prob = np.prod([(1 - q) if up[link] else q for link in window])
        adjacency = np.zeros((k, k))
        for j in np.flatnonzero(up):
            adjacency[j, (j + 1) % k] = adjacency[(j + 1) % k, j] = 1.0
        w = metropolis(adjacency)
        row_w += prob * w[i]
        row_w2 += prob * (w @ w)[i]
    mean = np.stack([np.roll(row_w, r - i) for r in range(k)])
    square = np.stack([np.roll(row_w2, r - i) for r in range(k)])
    # E[w] of a link: up (1 − q), 1/2 when both neighbouring links are down (q²), else 1/3
    assert mean[i, i + 1] == pytest.approx((1 - q) * (1 / 3 + q * q / 6), abs=8 * EPS)
    lam = np.linalg.eigvalsh(mean)
    moduli = np.sort(np.abs(lam))[::-1]
    return {"spectral_gap": 1.0 - moduli[1],  # = 2a(1 − cos(2π/K)), a the mean link weight above
            "p": 1.0 - np.linalg.eigvalsh(square - 1.0 / k).max(),  # (W − J)ᵀ(W − J) = W² − J: W symmetric, DS
            "p_mean": 1.0 - (np.trace(square) - 1.0) / (k - 1),
            "n_eff": 1.0 / ((1.0 - gamma) * np.mean(lam ** 2 / (1.0 - gamma * lam ** 2)))}


def bootstrap_tolerance(ws: np.ndarray, key: str) -> float:
    """STANDARD_ERRORS bootstrap standard errors of the measure over the rounds `ws`, plus the bootstrap estimate of
    its bias (λ2 of a mean of random matrices is biased up at finite N): what N rounds leave of the limit."""
    grams = np.stack([centred_gram(w) for w in ws])
    rng = np.random.default_rng(0)
    here = measures_of(ws, grams)[key]
    draws = []
    for _ in range(BOOTSTRAP):
        idx = rng.integers(0, len(ws), len(ws))
        draws.append(measures_of(ws[idx], grams[idx])[key])
    return abs(float(np.mean(draws)) - here) + STANDARD_ERRORS * float(np.std(draws, ddof=1))


@pytest.fixture(scope="module")
def ring() -> dict[float, tuple[dict, np.ndarray]]:
    return {q: ring_rounds(q) for q in FAILURES}


@pytest.mark.numerics
def test_ring_link_failures_slow_every_measure_and_match_its_definition(ring):
    """The issue's property: on a ring of 16 with --link-failure q, every measure falls strictly as q grows (the
    failures use one uniform per link and round whatever q, so the draws are nested and the ordering holds round by
    round too); each equals its definition on the rounds used (float64) and its closed-form limit (Monte Carlo)."""
    for key in KEYS:
        values = [ring[q][0][key] for q in FAILURES]
        assert all(a > b for a, b in zip(values, values[1:])), (key, values)
    for q in FAILURES[1:]:
        got, ws = ring[q]
        assert (got["rounds"], got["peers"]) == (SAMPLED, RING)
        assert got["rule"] == f"mean over {SAMPLED} sampled rounds of {RING_ROUNDS}" and got["estimated"] == []
        # (a) the definitions on the very rounds sampled
        want = measures_of(ws)
        bound = eig_bound(RING, SAMPLED)
        for key in ("spectral_gap", "p", "p_mean"):
            assert got[key] == pytest.approx(want[key], rel=0, abs=bound), (q, key)
        assert got["n_eff"] == pytest.approx(want["n_eff"], rel=n_eff_bound(RING, SAMPLED)), q
        # (b) the infinite-round limit, to what 256 rounds leave
        limit = ring_limits(q)
        for key in KEYS:
            assert got[key] == pytest.approx(limit[key], rel=0, abs=bootstrap_tolerance(ws, key)), (q, key)
    # the worst case never exceeds the average, and no failure pretends to speed the mixing
    for q in FAILURES:
        got = ring[q][0]
        assert got["p"] <= got["p_mean"] + eig_bound(RING, SAMPLED)
        assert got["p"] <= ring[0.0][0]["p"]


@pytest.mark.numerics
def test_intact_ring_is_the_static_closed_form(ring):
    """q = 0: one W, exact: the topologies.measures functions of W and the ring's closed forms (Metropolis 1/3:
    λ_k = 1/3 + 2/3·cos(2πk/16))."""
    got, _ = ring[0.0]
    w = metropolis(np.roll(np.eye(RING), 1, axis=1) + np.roll(np.eye(RING), -1, axis=1))
    assert (got["rule"], got["rounds"], got["peers"]) == (STATIC_RULE, 1, RING)
    bound = eig_bound(RING, 1)
    assert got["p"] == pytest.approx(p_worst(w), rel=0, abs=bound)
    assert got["spectral_gap"] == pytest.approx(1.0 - second_eigenvalue_modulus(w), rel=0, abs=bound)
    assert got["p_mean"] == pytest.approx(1.0 - expected_contraction(w), rel=0, abs=bound)
    assert got["n_eff"] == pytest.approx(n_eff(w, GAMMA), rel=n_eff_bound(RING, 1))
    lam = 1 / 3 + 2 / 3 * np.cos(2 * np.pi * np.arange(RING) / RING)
    second = np.sort(np.abs(lam))[::-1][1]
    assert got["spectral_gap"] == pytest.approx(1.0 - second, rel=0, abs=bound)
    assert got["p"] == pytest.approx(1.0 - second ** 2, rel=0, abs=bound)
    assert got["p_mean"] == pytest.approx(1.0 - (lam[1:] ** 2).sum() / (RING - 1), rel=0, abs=bound)
    assert got["p"] == pytest.approx(0.0989, abs=5e-5) and got["p_mean"] == pytest.approx(0.7111, abs=5e-5)


@pytest.mark.numerics
@pytest.mark.parametrize("topology", ["complete", "cycle", "star"])
def test_static_graphs_carry_the_closed_forms_of_their_w(topology):
    cfg = config(peers=9, rounds=5, topology=topology)
    _, _, record = build_network(cfg)
    w = mixing_of(record)
    got = record["stats"]["mixing"]
    assert (got["rule"], got["rounds"], got["peers"], got["n_eff_gamma"]) == (STATIC_RULE, 1, 9, GAMMA)
    bound = eig_bound(9, 1)
    assert got["p"] == pytest.approx(p_worst(w), rel=0, abs=bound)
    assert got["spectral_gap"] == pytest.approx(1.0 - second_eigenvalue_modulus(w), rel=0, abs=bound)
    assert got["p_mean"] == pytest.approx(1.0 - expected_contraction(w), rel=0, abs=bound)
    assert got["n_eff"] == pytest.approx(n_eff(w, GAMMA), rel=n_eff_bound(9, 1))
    # the top-level stats describe the same W in closed form, and are no longer overwritten
    stats = record["stats"]
    assert (stats["p"], stats["p_source"]) == (stats["p_worst"], "closed form")
    assert stats["p"] == pytest.approx(got["p"], rel=0, abs=bound)


@pytest.mark.numerics
def test_one_w_over_many_rounds_is_p_worst():
    """A static ring marked as changing (a crash after the last round) averages the same W over every round: the
    general path gives p_worst(W) to rounding, and the static W's gap and n_eff."""
    cfg = config("--crash", "3@1000", rounds=40, peers=12)
    _, schedule, record = build_network(cfg)
    got = record["stats"]["mixing"]
    w = schedule.static_weights.toarray()
    assert (got["rounds"], got["rule"]) == (40, "mean over 40 sampled rounds of 40")
    bound = eig_bound(12, 40)
    assert got["p"] == pytest.approx(p_worst(w), rel=0, abs=bound)
    assert got["spectral_gap"] == pytest.approx(1.0 - second_eigenvalue_modulus(w), rel=0, abs=bound)
    assert got["p_mean"] == pytest.approx(1.0 - expected_contraction(w), rel=0, abs=bound)
    assert got["n_eff"] == pytest.approx(n_eff(w, GAMMA), rel=n_eff_bound(12, 40))


@pytest.mark.numerics
@pytest.mark.parametrize("options,topology", [
    (("--participation", "0.5"), "cycle"), (("--churn", "0.2"), "random"), (("--crash", "3@4,5@30"), "cycle"),
    (("--resample", "--p", "0.4"), "random"), ((), "k-peer-exponential"), ((), "epidemic"),
    (("--topology-params", "active=6"), "teleport"), (("--mixing", "uniform", "--link-failure", "0.2"), "star")])
def test_every_changing_network_is_measured_by_the_same_definitions(options, topology):
    """Participation, churn, crashes, resampled and dynamic topologies, epidemic and teleport (its hand-over in
    M_t): the record equals the dense definitions over the round operators of the sampled rounds that share the last
    one's alive peers."""
    rounds = 40
    _, schedule, record = build_network(config(*options, peers=10, rounds=rounds, topology=topology))
    got = record["stats"]["mixing"]
    alive = schedule.alive(rounds)
    keep = sorted(alive)
    used = [t for t in range(1, rounds + 1) if schedule.alive(t) == alive]
    ws = np.stack([round_operator(schedule.at(t)).toarray()[np.ix_(keep, keep)] for t in used])
    want = measures_of(ws)
    assert (got["rounds"], got["peers"]) == (len(used), len(keep))
    if len(used) < rounds:
        assert f"{rounds - len(used)} sampled rounds with another alive set left out" in got["rule"]
    bound = eig_bound(len(keep), len(used))
    mean = ws.mean(axis=0)
    vals, vecs = np.linalg.eig(mean)
    kappa = 1.0 if np.array_equal(mean, mean.T) else float(np.linalg.cond(vecs))  # Bauer–Fike
    assert got["spectral_gap"] == pytest.approx(want["spectral_gap"], rel=0, abs=kappa * bound)
    assert got["p"] == pytest.approx(want["p"], rel=0, abs=bound)
    assert got["p_mean"] == pytest.approx(want["p_mean"], rel=0, abs=bound)
    if want["n_eff"] is None:
        assert got["n_eff"] is None
    else:
        assert got["n_eff"] == pytest.approx(want["n_eff"], rel=n_eff_bound(len(keep), len(used)))
    assert got["p"] <= got["p_mean"] + bound


@pytest.mark.numerics
@pytest.mark.parametrize("mixing", ["metropolis", "uniform"])
def test_sparse_path_agrees_with_the_dense_computation(mixing):
    """600 peers (> DENSE_MAX): E[MᵀM] sparse with ARPACK (deflated E[MᵀM] − J for Metropolis, whose W_t are doubly
    stochastic; the general operator for uniform, whose are not), against the dense definitions of the same rounds.
    n_eff there is a Hutchinson estimate, within STANDARD_ERRORS of its own reported standard error."""
    k, rounds = 600, 6
    assert k > DENSE_MAX
    _, schedule, record = build_network(config("--link-failure", "0.3", "--mixing", mixing, peers=k, rounds=rounds))
    got = record["stats"]["mixing"]
    ws = np.stack([round_operator(schedule.at(t)).toarray() for t in range(1, rounds + 1)])
    want = measures_of(ws)
    bound = eig_bound(k, rounds)
    mean = ws.mean(axis=0)
    kappa = 1.0 if np.array_equal(mean, mean.T) else float(np.linalg.cond(np.linalg.eig(mean)[1]))
    assert got["spectral_gap"] == pytest.approx(want["spectral_gap"], rel=0, abs=kappa * bound)
    assert got["p"] == pytest.approx(want["p"], rel=0, abs=bound)
    assert got["p_mean"] == pytest.approx(want["p_mean"], rel=0, abs=bound)
    if mixing == "uniform":
        assert want["n_eff"] is None and got["n_eff"] is None and got["estimated"] == []
        assert got["p"] < 0  # row-stochastic only: the worst case can grow the spread
    else:
        (line,) = got["estimated"]
        error = float(line.rsplit("relative standard error ", 1)[1])
        assert line.startswith("n_eff: Hutchinson")
        assert got["n_eff"] == pytest.approx(want["n_eff"], rel=STANDARD_ERRORS * error)


# ---------------------------------------------------------------------------------------------- the study report
STUDY_ROUNDS = 6
STUDY_PEERS = 12
ARMS = {"intact": (), "failing": ("--link-failure", "0.3")}


def _run_options(arm: str) -> list[str]:
    return ["--algorithm", "consensus", "--peers", str(STUDY_PEERS), "--rounds", str(STUDY_ROUNDS), "--topology",
            "cycle", "--vector-size", "4", "--no-progress", "--no-plots", *ARMS[arm]]


@pytest.fixture(scope="module")
def mixed_study(tmp_path_factory) -> Path:
    """A study folder as p2pfl.study lays it out: plan.json, runs/NAME/ from real in-process consensus runs (one
    static ring, one ring at 30% link failure), logs/NAME.rc."""
    root = tmp_path_factory.mktemp("mixing-study")
    (root / "logs").mkdir()
    entries = []
    for arm in ARMS:
        name = f"network-{arm}__seed-0"
        assert run_main([*_run_options(arm), "--out", str(root / "runs"), "--name", name]) == 0
        (root / "logs" / f"{name}.rc").write_text("0\n")
        entries.append({"name": name, "axes": {"network": arm, "seed": "0"}, "options": {}})
    (root / "plan.json").write_text(json.dumps({"name": "mixing", "axes": ["network", "seed"], "points": entries}))
    return root


def _table(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "table.csv", newline="") as fh:
        return {row["network"]: row for row in csv.DictReader(fh)}


def _want(arm: str) -> dict[str, float | None]:
    """The definitions, dense, over the arm's rounds (its network rebuilt from its options)."""
    cfg = resolve(parse_args(_run_options(arm))[0], 1).cfg
    _, schedule, _ = build_network(cfg, described=False)
    return measures_of(np.stack([schedule.at(t).W.toarray() for t in range(1, STUDY_ROUNDS + 1)]))


def _header(report: str) -> str:
    return next(line for line in report.splitlines() if line.startswith("| network |"))


@pytest.mark.numerics
def test_report_columns_hold_one_definition_each(mixed_study, tmp_path):
    out = tmp_path / "report"
    assert report_main([str(mixed_study), "--out", str(out)]) == 0
    table = _table(out)
    bound = eig_bound(STUDY_PEERS, STUDY_ROUNDS)
    for arm in ARMS:
        want = _want(arm)
        for key in KEYS:
            assert float(table[arm][key]) == pytest.approx(want[key], rel=n_eff_bound(STUDY_PEERS, STUDY_ROUNDS)
                                                           if key == "n_eff" else 0, abs=bound), (arm, key)
    assert float(table["failing"]["p"]) < float(table["intact"]["p"])  # failures slow the mixing, p says so
    assert float(table["failing"]["spectral_gap"]) < float(table["intact"]["spectral_gap"])
    assert float(table["failing"]["p_mean"]) < float(table["intact"]["p_mean"])
    report = (out / "report.md").read_text()
    header = _header(report)
    for label in MEASURES.values():
        assert label.replace("|", "\\|") in header
    assert "λmax E[(W−J)ᵀ(W−J)] (worst case)" in header and "mean contraction on random X" in header
    assert "Measures not recomputed" not in report
    assert (out / "measures.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.numerics
def test_an_old_folder_keeps_its_changing_p_as_p_mean_only(mixed_study, tmp_path):
    """Manifests written before stats["mixing"]: the static run's closed-form record gets all four from its W; the
    failing run's record held the random-X estimate of p (p_source says so), which becomes p_mean, the rest empty,
    and report.md names the group."""
    old = tmp_path / "old"
    shutil.copytree(mixed_study, old, ignore=shutil.ignore_patterns("report"))
    estimate = 0.5432
    for arm in ARMS:
        manifest = old / "runs" / f"network-{arm}__seed-0" / "manifest.json"
        data = json.loads(manifest.read_text())
        stats = data["topology"]["stats"]
        del stats["mixing"]
        if arm == "failing":
            stats["p"], stats["p_source"] = estimate, "random-X estimate over 6 rounds (32 columns)"
        manifest.write_text(json.dumps(data))
    out = tmp_path / "report"
    assert report_main([str(old), "--out", str(out)]) == 0
    table = _table(out)
    assert float(table["failing"]["p_mean"]) == estimate
    assert table["failing"]["p"] == table["failing"]["spectral_gap"] == table["failing"]["n_eff"] == ""
    want = _want("intact")
    bound = eig_bound(STUDY_PEERS, 1)
    for key in ("spectral_gap", "p", "p_mean"):
        assert float(table["intact"][key]) == pytest.approx(want[key], rel=0, abs=bound), key
    assert float(table["intact"]["n_eff"]) == pytest.approx(want["n_eff"], rel=n_eff_bound(STUDY_PEERS, 1))
    report = (out / "report.md").read_text()
    (note,) = [line for line in report.splitlines() if line.startswith("Measures not recomputed")]
    assert "network=failing" in note and "network=intact" not in note and "p_mean" in note
