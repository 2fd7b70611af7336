"""The decentralised optimisers of SPEC §7 (--gossip) on the quadratic test problem (--algorithm quadratic), in
float64 with exact gradients, against closed forms and this file's own dense implementation of each scheme
(X and W stacked over peers as numpy matrices, the SPEC's row form; nothing of p2pfl.gossip)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from conftest import run_job, runs_on_ranks

SCHEMES = ("average", "gradient-tracking", "d2", "exact-diffusion", "qgm", "push-sum")
K, D, LR, SEED, MU = 8, 5, 0.05, 0, 0.9
#: Rounds after which the exact schemes must be below 1e-20 on the ring of 8 at LR (measured: GT 2e-27, D² 2e-26,
#: exact diffusion 5e-29; the floor of float64 is near 1e-30).
EXACT_ROUNDS = 300


def _job(runs_dir: Path, name: str, *extra: str, ranks: int = 0, rounds: int = EXACT_ROUNDS,
         peers: int = K) -> Path:
    args = ["-m", "p2pfl.run", "--algorithm", "quadratic", "--peers", str(peers), "--rounds", str(rounds),
            "--dim", str(D), "--lr", str(LR), "--seed", str(SEED), "--momentum", str(MU), "--eval-every", "0", "--out",
            str(runs_dir),
            "--name", name, "--no-progress", "--no-plots", *extra]
    proc = run_job(args, ranks=ranks)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return runs_dir / name


def _records(run_dir: Path) -> list[dict]:
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in lines if r["type"] == "round"]


def _errors(run_dir: Path) -> np.ndarray:
    return np.array([r["error"] for r in _records(run_dir)])


# ------------------------------------------------------------------ the test's own implementation (dense, numpy)

def _problem(zeta2: float, peers: int = K) -> tuple[np.ndarray, np.ndarray]:
    """SPEC §7's generator: a_i = (i + 1)/√K (A_i = a_i I), b_i ~ N(0, ζ²/(i + 1)² I) from the stream
    (seed, i, "quadratic")."""
    from p2pfl.seeding import numpy_rng
    a = np.array([(i + 1) / math.sqrt(peers) for i in range(peers)])
    b = np.stack([numpy_rng(SEED, i, "quadratic").standard_normal(D) * math.sqrt(zeta2) / (i + 1)
                  for i in range(peers)])
    return a, b


def _x_star(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """argmin Σ ½‖a_i x − b_i‖² in closed form: Σ a_i b_i / Σ a_i²."""
    return (a[:, None] * b).sum(0) / (a ** 2).sum()


def _ring(n: int) -> np.ndarray:
    """Metropolis weights of the ring: 1/3 on each neighbour and on itself."""
    W = np.eye(n) / 3
    for i in range(n):
        W[i, (i + 1) % n] += 1 / 3
        W[i, (i - 1) % n] += 1 / 3
    return W


def _dense(scheme: str, weights, a: np.ndarray, b: np.ndarray, rounds: int, local_steps: int = 1) -> np.ndarray:
    """The error trace (round 0 first) of `scheme` in SPEC §7's row form; `weights(t)` is W_t. With E local steps,
    G = (X − X_E)/η of E plain gradient steps."""
    n = len(a)

    def grad(X: np.ndarray) -> np.ndarray:
        return a[:, None] * (a[:, None] * X - b)

    def G(X: np.ndarray) -> np.ndarray:
        if local_steps == 1:
            return grad(X)
        Z = X.copy()
        for _ in range(local_steps):
            Z = Z - LR * grad(Z)
        return (X - Z) / LR

    xs = _x_star(a, b)
    X = np.ones((n, D))
    w = np.ones((n, 1))  # push-sum's weights; its models are Z = X / w
    errors = [np.mean((X - xs) ** 2)]
    Y = G(X)
    M = np.zeros_like(X)
    X_prev = G_prev = None
    for t in range(1, rounds + 1):
        W = weights(t)
        if scheme == "push-sum":
            S = (W > 0).astype(float)  # i hears from j, or i = j
            P = S / S.sum(axis=0, keepdims=True)  # column j: j's mass split over itself and its out-links
            X, w = P @ (X - LR * G(X / w)), P @ w
            errors.append(np.mean((X / w - xs) ** 2))
            continue
        g = G(X)
        if scheme == "average":
            X_new = W @ (X - LR * g)
        elif scheme == "gradient-tracking":
            X_new = W @ (X - LR * Y)
            Y = W @ Y + G(X_new) - g
        elif scheme == "qgm":
            X_new = W @ (X - LR * (MU * M + g))
            M = MU * M + (1 - MU) * (X - X_new) / LR
        else:
            if scheme == "exact-diffusion":
                W = (W + np.eye(n)) / 2
            X_new = W @ (X - LR * g) if X_prev is None else W @ (2 * X - X_prev - LR * (g - G_prev))
            X_prev, G_prev = X, g
        X = X_new
        errors.append(np.mean((X - xs) ** 2))
    return np.array(errors)


def _same_trace(got: np.ndarray, want: np.ndarray) -> None:
    """Equal to 1e-12 relative, or where the error is near float64's floor, iterates equal to 1e-14 absolute
    (|Δ mean (x − x*)²| <= 2 √error · max|Δx|)."""
    assert got.shape == want.shape
    bound = 1e-12 * want + 2e-14 * np.sqrt(want)
    worst = int(np.argmax(np.abs(got - want) / bound))
    assert np.all(np.abs(got - want) <= bound), (worst, got[worst], want[worst])


# ------------------------------------------------------------------ (a) exact convergence, and the bias of average

@pytest.fixture(scope="module")
def ring_runs(tmp_path_factory) -> dict[str, np.ndarray]:
    runs_dir = tmp_path_factory.mktemp("ring")
    return {s: _errors(_job(runs_dir, s, "--topology", "cycle", "--gossip", s)) for s in SCHEMES}


@pytest.mark.numerics
@pytest.mark.parametrize("scheme", ["gradient-tracking", "d2", "exact-diffusion"])
def test_exact_schemes_converge_geometrically_to_the_optimum(ring_runs, scheme: str) -> None:
    """Heterogeneous quadratics (ζ² = 1), constant step 0.05, a ring of 8 (D² at λ_min = −1/3 exactly): the error
    falls geometrically, below 1e-20 after 300 rounds."""
    e = ring_runs[scheme]
    assert len(e) == EXACT_ROUNDS + 1 and e[0] == pytest.approx(np.mean((1 - _x_star(*_problem(1.0))) ** 2))
    assert e[100] < 1e-9 and e[200] < 1e-16 and e[EXACT_ROUNDS] < 1e-20
    assert e[200] / e[100] < 1e-6  # geometric: a fixed factor per 100 rounds


def test_average_and_qgm_stop_at_the_closed_form_bias(ring_runs) -> None:
    """D-PSGD's fixed point X* = W(X* − η ∇F(X*)), per coordinate (I − W(I − η A²)) X* = η W A b: the run ends at
    its error, far above the exact schemes'. Quasi-global momentum has the same fixed point (M = 0 there)."""
    a, b = _problem(1.0)
    W = _ring(K)
    X = np.linalg.solve(np.eye(K) - W @ np.diag(1 - LR * a ** 2), LR * W @ (a[:, None] * b))
    bias = np.mean((X - _x_star(a, b)) ** 2)
    assert bias > 1e-3
    assert ring_runs["average"][-1] == pytest.approx(bias, rel=1e-9)
    assert ring_runs["qgm"][-1] == pytest.approx(bias, rel=1e-3)


def test_average_bias_grows_with_heterogeneity_and_the_inverse_gap(runs_dir: Path, ring_runs) -> None:
    """The bias is linear in b, so ×4 with ζ² ×4; it shrinks as the spectral gap 1 − λ2 grows: ring (0.195) >
    G(8, 0.7) (0.413) > complete (1, where it is 0: every peer holds the average, whose fixed point is x*)."""
    import topologies
    bias = {"ring": ring_runs["average"][-1]}
    bias["ring4"] = _errors(_job(runs_dir, "z4", "--topology", "cycle", "--zeta2", "4"))[-1]
    bias["random"] = _errors(_job(runs_dir, "rnd", "--topology", "random", "--p", "0.7"))[-1]
    bias["complete"] = _errors(_job(runs_dir, "all", "--topology", "complete"))[-1]
    assert bias["ring4"] / bias["ring"] == pytest.approx(4.0, rel=1e-9)
    gaps = {}
    for name, kw in (("ring", {}), ("random", {"p": 0.7}), ("complete", {})):
        graph = topologies.build({"ring": "cycle"}.get(name, name), K, seed=SEED, **kw)
        W = topologies.mixing_matrix(graph, "metropolis")
        gaps[name] = 1 - np.sort(np.abs(np.linalg.eigvals(W)))[-2]
    assert gaps["ring"] < gaps["random"] < gaps["complete"]
    assert bias["ring"] > bias["random"] > 0.5e-4 > 1e-25 > bias["complete"]


# ------------------------------------------------------------------ (b) the run's trace is the dense implementation's

@pytest.mark.numerics
@pytest.mark.parametrize("scheme", SCHEMES)
def test_trace_equals_the_dense_implementation(ring_runs, scheme: str) -> None:
    a, b = _problem(1.0)
    _same_trace(ring_runs[scheme], _dense(scheme, lambda t: _ring(K), a, b, EXACT_ROUNDS))


@pytest.mark.parametrize("scheme", ["gradient-tracking", "d2"])
def test_trace_under_link_failures_and_local_steps(runs_dir: Path, scheme: str) -> None:
    """Links failing with probability 0.3: every round mixes by that round's surviving network's W_t (read from the
    run's own schedule, the input); 3 local steps a round make G = (x − x_3)/η."""
    from p2pfl.config import make_config, resolve
    from p2pfl.network import NetworkOptions, NetworkSchedule
    from p2pfl.run import support_graph
    options = ["--topology", "cycle", "--gossip", scheme, "--link-failure", "0.3", "--local-steps", "3"]
    got = _errors(_job(runs_dir, scheme, *options, rounds=60))
    cfg = resolve(make_config(algorithm="quadratic", peers=K, topology="cycle", link_failure=0.3, seed=SEED,
                              rounds=60), 1).cfg
    schedule = NetworkSchedule.from_options(NetworkOptions.of(cfg), support_graph(cfg, K))
    a, b = _problem(1.0)
    assert any(not np.allclose(schedule.at(t).W.toarray(), _ring(K)) for t in range(1, 61))
    _same_trace(got, _dense(scheme, lambda t: schedule.at(t).W.toarray(), a, b, 60, local_steps=3))


def test_gradient_tracking_sends_two_vectors(ring_runs, runs_dir: Path) -> None:
    """x and y both travel through the pipeline: twice the bytes of average's one vector (D² sends one)."""
    sent = {s: _records(_job(runs_dir, s, "--topology", "cycle", "--gossip", s, rounds=2))[1]["bytes_sent"]
            for s in ("average", "gradient-tracking", "d2")}
    assert sent["average"] == K * 2 * D * 8  # each peer sends d float64 to each of its 2 neighbours
    assert sent["gradient-tracking"] == 2 * sent["average"] and sent["d2"] == sent["average"]


def test_push_sum_keeps_the_masses_through_link_failures(runs_dir: Path) -> None:
    """The one-peer exponential graph (one-way links), links failing with probability 0.3: push-sum's trace equals
    the dense column-stochastic implementation, Σ_i w_i stays K every round, and with the gradient steps made
    negligible (η = 1e-300) Σ_i x_i stays K·d: both transported exactly, to rounding."""
    from p2pfl.config import make_config, resolve
    from p2pfl.network import NetworkOptions, NetworkSchedule
    from p2pfl.run import support_graph
    options = ["--topology", "one-peer-exponential", "--gossip", "push-sum", "--link-failure", "0.3"]
    run = _records(_job(runs_dir, "ps", *options, rounds=60))
    cfg = resolve(make_config(algorithm="quadratic", peers=K, topology="one-peer-exponential", link_failure=0.3,
                              seed=SEED, rounds=60), 1).cfg
    schedule = NetworkSchedule.from_options(NetworkOptions.of(cfg), support_graph(cfg, K))
    assert any(schedule.at(t).links < K for t in range(1, 61))  # links did fail
    a, b = _problem(1.0)
    _same_trace(np.array([r["error"] for r in run]), _dense("push-sum", lambda t: schedule.at(t).W.toarray(), a, b, 60))
    assert all(abs(r["weight_sum"] - K) < 1e-12 for r in run)
    frozen = _records(_job(runs_dir, "frozen", *options, "--lr", "1e-300", rounds=60))
    assert all(abs(r["weight_sum"] - K) < 1e-12 and abs(r["numerator_sum"] - K * D) < 1e-11 for r in frozen)
    assert np.ptp([r["error"] for r in frozen]) < 1e-12  # the models z = x/w do not move either


# ------------------------------------------------------------------ (c) D²'s condition on λ_min

def test_d2_refuses_lambda_min_below_minus_one_third(runs_dir: Path) -> None:
    """Uniform weights on a star of 8 have λ_min = −3/8: d2 is refused before training in one line naming exact
    diffusion, which runs there; the even ring (λ_min = −1/3 exactly) runs (ring_runs)."""
    args = ["-m", "p2pfl.run", "--algorithm", "quadratic", "--peers", "8", "--rounds", "5", "--topology", "star",
            "--mixing", "uniform", "--out", str(runs_dir), "--no-progress", "--no-plots"]
    proc = run_job([*args, "--gossip", "d2", "--name", "d2"], ranks=0)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--gossip d2" in lines[0] and "exact-diffusion" in lines[0], proc.stderr
    assert not (runs_dir / "d2" / "metrics.jsonl").exists()
    ok = run_job([*args, "--gossip", "exact-diffusion", "--name", "ed"], ranks=0)
    assert ok.returncode == 0, ok.stderr[-2000:]


def test_lambda_min_tolerance() -> None:
    from p2pfl.gossip.schemes import SCHEMES
    ring = _ring(8)
    assert np.min(np.linalg.eigvalsh(ring)) == pytest.approx(-1 / 3)
    SCHEMES.get("d2").check_weights([ring, _ring(6), _ring(4)])
    star = np.full((8, 8), 0.0)
    star[0, :] = 1 / 8
    for i in range(1, 8):
        star[i, 0] = star[i, i] = 0.5
    with pytest.raises(ValueError, match="exact-diffusion"):
        SCHEMES.get("d2").check_weights([star])
    SCHEMES.get("exact-diffusion").check_weights([star])


# ------------------------------------------------------------------ (d) placement: 1, 2 and 4 ranks

PLACED = [*SCHEMES, "relay"]  # relay on the random graph's BFS tree


@pytest.fixture(scope="module")
def placement_traces(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], list[dict]]:
    """Every scheme's 30-round trace on the random graph, on 1, 2 and 4 ranks: one launch a rank count, every
    scheme's run in it (tests/mpi/runs.py)."""
    runs = tmp_path_factory.mktemp("placement")
    traces = {}
    for ranks in (1, 2, 4):
        commands = {scheme: ["--algorithm", "quadratic", "--peers", str(K), "--rounds", "30", "--dim", str(D), "--lr",
                             str(LR), "--seed", str(SEED), "--momentum", str(MU), "--eval-every", "0", "--out",
                             str(runs), "--name", f"{scheme}-{ranks}", "--no-progress", "--no-plots", "--topology",
                             "random", "--p", "0.5", "--gossip", scheme, "--sgd-noise", "0.1"] for scheme in PLACED}
        runs_on_ranks(commands, ranks, runs)
        traces.update({(scheme, ranks): _records(runs / f"{scheme}-{ranks}") for scheme in PLACED})
    return traces


@pytest.mark.mpi
@pytest.mark.parametrize("scheme", PLACED)
def test_same_trace_on_1_2_and_4_ranks(placement_traces: dict, scheme: str) -> None:
    """Peers are not ranks: the errors (every scheme's state included) and the bytes are the same bit for bit
    whether the 8 peers sit on one process or are split 4+4 or 2+2+2+2."""
    traces = {ranks: placement_traces[scheme, ranks] for ranks in (1, 2, 4)}
    assert len(traces[1]) == 31
    for ranks in (2, 4):
        assert [r["error"] for r in traces[ranks]] == [r["error"] for r in traces[1]], ranks  # bitwise
        assert [r["bytes_sent"] for r in traces[ranks][1:]] == [r["bytes_sent"] for r in traces[1][1:]], ranks


# ------------------------------------------------------------------ (e) checkpoint and resume

def _numbers(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time_") and k not in ("elapsed_s", "round_s")}
            for r in _records(run_dir)]


@pytest.mark.parametrize("scheme", [*SCHEMES, "relay"])  # relay on the ring's BFS tree
def test_resume_is_exact(runs_dir: Path, scheme: str) -> None:
    """Stopped after round 4 and resumed: the state each scheme keeps (trackers, last model and gradient, the noise
    stream, relay's last messages, counts and x_init) is in the checkpoint, so the records equal an uninterrupted
    run's bit for bit."""
    options = ["--topology", "cycle", "--gossip", scheme, "--sgd-noise", "0.1", "--checkpoint-every", "2"]
    full = _numbers(_job(runs_dir, "full", *options, rounds=8))
    _job(runs_dir, "part", *options, rounds=4)
    proc = run_job(["-m", "p2pfl.run", "--algorithm", "quadratic", "--peers", str(K), "--rounds", "8", "--dim",
                    str(D), "--lr", str(LR), "--eval-every", "0", *options, "--resume", str(runs_dir / "part"),
                    "--no-progress", "--no-plots"], ranks=0)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _numbers(runs_dir / "part") == full


# ------------------------------------------------------------------ (f) --problem FILE.npz

def test_problem_file_runs_and_matches_its_own_optimum(runs_dir: Path, tmp_path: Path) -> None:
    """A general problem (dense A_i): gradient tracking reaches its least-squares optimum; the trace starts at the
    error of x₀ = 1 against it."""
    rng = np.random.default_rng(3)
    A = rng.standard_normal((4, 3, 3)) * 0.4 + np.eye(3)
    b = rng.standard_normal((4, 3))
    path = tmp_path / "p.npz"
    np.savez(path, A=A, b=b)
    x_star = np.linalg.solve(sum(a.T @ a for a in A), sum(a.T @ v for a, v in zip(A, b)))
    e = _errors(_job(runs_dir, "file", "--problem", str(path), "--gossip", "gradient-tracking", peers=4,
                     rounds=400))
    assert e[0] == pytest.approx(np.mean((1 - x_star) ** 2), rel=1e-12)
    assert e[-1] < 1e-20


@pytest.mark.parametrize("arrays,what", [({"A": np.zeros((4, 3, 2)), "b": np.zeros((4, 3))}, "A [4, 3, 2]"),
                                         ({"A": np.zeros((3, 3, 3)), "b": np.zeros((3, 3))}, "K = 4"),
                                         ({"A": np.zeros((4, 3, 3))}, "'A' and 'b'")])
def test_problem_file_with_bad_shapes_is_one_line(runs_dir: Path, tmp_path: Path, arrays: dict, what: str) -> None:
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    proc = run_job(["-m", "p2pfl.run", "--algorithm", "quadratic", "--peers", "4", "--rounds", "3", "--problem",
                    str(path), "--out", str(runs_dir), "--name", "bad", "--no-progress", "--no-plots"], ranks=0)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"p2pfl: error: --problem {path}:") and what in lines[0], lines
    metrics = runs_dir / "bad" / "metrics.jsonl"
    assert not metrics.exists() or not metrics.read_text().strip()  # refused before round 0


def test_qgm_refuses_an_optimiser_other_than_sgd(runs_dir: Path) -> None:
    proc = run_job(["-m", "p2pfl.run", "--algorithm", "quadratic", "--peers", "4", "--gossip", "qgm", "--optimizer",
                    "adam", "--out", str(runs_dir), "--no-progress"], ranks=0)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--optimizer" in lines[0] and "sgd" in lines[0], proc.stderr


def test_methods_without_schemes_refuse_them(runs_dir: Path) -> None:
    """Nothing ignores --gossip silently: a method that mixes by average only says so before training."""
    for method, scheme in (("scaffold", "d2"), ("local", "d2"), ("dec-featarc", "d2"), ("solo", "push-sum")):
        proc = run_job(["-m", "p2pfl.run", "--algorithm", method, "--dataset", "synthetic", "--peers", "4",
                        "--gossip", scheme, "--optimizer", "sgd", "--out", str(runs_dir), "--no-progress"], ranks=0)
        assert proc.returncode == 2
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "--gossip" in lines[0] and method in lines[0], proc.stderr


# ------------------------------------------------------------------ the learning methods (G = local update / −η)

LEARNER = ["-m", "p2pfl.run", "--dataset", "synthetic", "--peers", "4", "--local-steps", "2", "--batch-size", "16",
           "--optimizer", "sgd", "--lr", "0.05", "--topology", "cycle", "--eval-every", "0", "--no-progress",
           "--no-plots", "--batch-peers", "off"]


LEARNER_SCHEMES = ("gradient-tracking", "d2", "exact-diffusion", "qgm", "push-sum", "relay")


@pytest.mark.parametrize("scheme", LEARNER_SCHEMES)
def test_fedavg_scheme_trains_and_resumes_exactly(runs_dir: Path, scheme: str) -> None:
    """FedAvg under each scheme: finite losses, gradient tracking's second vector, push-sum's weight and relay's
    counts counted, and the state the scheme keeps in the peer record (trackers, last model and G, qgm's m,
    push-sum's w, relay's messages) checkpointed, so a run stopped after round 2 and resumed equals an
    uninterrupted one bit for bit."""
    args = [*LEARNER, "--algorithm", "fedavg", "--gossip", scheme, "--checkpoint-every", "1", "--out", str(runs_dir)]
    for name, rounds in (("full", 3), ("part", 2)):
        proc = run_job([*args, "--rounds", str(rounds), "--name", name], ranks=0)
        assert proc.returncode == 0, proc.stderr[-2000:]
    proc = run_job([*args, "--rounds", "3", "--resume", str(runs_dir / "part")], ranks=0)
    assert proc.returncode == 0, proc.stderr[-2000:]
    full = _numbers(runs_dir / "full")
    assert _numbers(runs_dir / "part") == full and len(full) == 4
    assert all(math.isfinite(r["loss_mean"]) for r in full[1:])
    manifest = json.loads((runs_dir / "full" / "manifest.json").read_text())
    values = manifest["model"]["mixed_per_message"]
    if scheme == "relay":  # the ring's BFS tree: 3 links both ways, each m and its count c
        per_round = 2 * 3 * (values + 1) * 4  # float32
    else:
        vector_bytes = (values + (scheme == "push-sum")) * 4  # float32; w rides along
        per_round = 4 * 2 * vector_bytes * (2 if scheme == "gradient-tracking" else 1)
    assert all(r["bytes_sent"] == per_round for r in full[1:])


def test_qgm_learner_steps_without_local_momentum(runs_dir: Path) -> None:
    """Under qgm --momentum is μ, applied once a round by the scheme: the local SGD steps run without momentum
    (their optimiser keeps no buffer), and the manifest says both; other schemes keep --momentum locally."""
    import torch

    from p2pfl.config import make_config
    from p2pfl.optim import local_momentum, make_optimizer
    for gossip, want in (("qgm", 0.0), ("average", 0.9), ("push-sum", 0.9)):
        cfg = make_config(algorithm="fedavg", optimizer="sgd", momentum=0.9, gossip=gossip)
        opt = make_optimizer([torch.nn.Parameter(torch.zeros(2))], cfg)
        assert local_momentum(cfg) == want and opt.param_groups[0]["momentum"] == want
    proc = run_job([*LEARNER, "--algorithm", "dec-sl", "--gossip", "qgm", "--momentum", "0.8", "--rounds", "1",
                    "--out", str(runs_dir), "--name", "q"], ranks=0)
    assert proc.returncode == 0, proc.stderr[-2000:]
    manifest = json.loads((runs_dir / "q" / "manifest.json").read_text())
    assert manifest["qgm"] == {"mu": 0.8, "local_momentum": 0.0}
    assert manifest["memory"]["optimizer_bytes_per_peer"] == 0  # no momentum buffer


def test_qgm_learner_refuses_an_optimiser_other_than_sgd(runs_dir: Path) -> None:
    proc = run_job(["-m", "p2pfl.run", "--algorithm", "dec-sl", "--dataset", "synthetic", "--peers", "4", "--gossip",
                    "qgm", "--optimizer", "adam", "--out", str(runs_dir), "--no-progress"], ranks=0)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--optimizer" in lines[0] and "sgd" in lines[0], proc.stderr


@pytest.mark.parametrize("scheme", LEARNER_SCHEMES)
def test_dec_sl_scheme_trains(runs_dir: Path, scheme: str) -> None:
    proc = run_job([*LEARNER, "--algorithm", "dec-sl", "--gossip", scheme, "--rounds", "3", "--out", str(runs_dir),
                    "--name", "sl"], ranks=0)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rounds = _records(runs_dir / "sl")
    assert len(rounds) == 4 and all(math.isfinite(r["loss_mean"]) for r in rounds[1:])
    assert rounds[-1]["consensus_distance"] > 0


def test_push_sum_refuses_weight_by_data(runs_dir: Path) -> None:
    """Push-sum's column-stochastic split takes no data sizes: --weight-by-data is refused, not ignored."""
    proc = run_job(["-m", "p2pfl.run", "--algorithm", "quadratic", "--peers", "4", "--gossip", "push-sum",
                    "--weight-by-data", "--out", str(runs_dir), "--no-progress"], ranks=0)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "out-links" in lines[0], proc.stderr
