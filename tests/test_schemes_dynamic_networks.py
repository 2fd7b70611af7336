"""Push-sum against weight averaging on one-way graphs, and every --gossip scheme under networks that change and
fail (SPEC §7), on consensus and the quadratic problem in float64. The expectations are computed here: the start's
mean from the seeded start vectors, and a dense numpy implementation of gradient tracking and push-sum that mixes
by the round's surviving network (checked against the run's own round records)."""
from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import run_job

SCHEMES = ("average", "gradient-tracking", "d2", "exact-diffusion", "qgm", "push-sum", "relay")
K, D, LR, SEED = 8, 5, 0.05, 0


def _lines(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _rounds(run_dir: Path) -> list[dict]:
    return [r for r in _lines(run_dir) if r["type"] == "round"]


def _evals(run_dir: Path) -> list[dict]:
    return [r["metrics"] for r in _lines(run_dir) if r["type"] == "eval"]


# ------------------------------------------------------------------ push-sum keeps the mean, averaging drifts

CONSENSUS_K, CONSENSUS_D, CONSENSUS_ROUNDS = 16, 1000, 300


def _consensus(runs_dir: Path, name: str, gossip: str, *network: str) -> Path:
    proc = run_job(["-m", "p2pfl.run", "--algorithm", "consensus", "--peers", str(CONSENSUS_K), "--rounds",
                    str(CONSENSUS_ROUNDS), "--topology", "one-peer-exponential", "--vector-size", str(CONSENSUS_D),
                    "--vector-dtype", "float64", "--gossip", gossip, *network, "--eval-every", "50", "--seed",
                    str(SEED), "--out", str(runs_dir), "--name", name, "--no-progress", "--no-plots"], ranks=0)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return runs_dir / name


def _start_mean() -> np.ndarray:
    """The mean of the K start vectors: unit normals from each peer's stream (seed, p, "init")."""
    from p2pfl.seeding import torch_generator
    starts = [torch.randn(CONSENSUS_D, generator=torch_generator(SEED, p, "init"), dtype=torch.float64).numpy()
              for p in range(CONSENSUS_K)]
    return np.mean(starts, axis=0)


#: Average's drift of the network mean, RMS per coordinate, must exceed this. Measured (K = 16, d = 1000, 300
#: rounds, seed 0): 0.21 with link failure 0.3, 0.16 with participation 0.6, against an RMS of 0.25 (1/√K) of the
#: start's mean itself: the network forgets most of where it started. A quarter of the smaller value leaves room
#: for another seed's draws while a drift-free rule (< 1e-12) cannot pass.
DRIFT_FLOOR = 0.04


@pytest.mark.numerics
@pytest.mark.parametrize("network", [("--link-failure", "0.3"), ("--participation", "0.6")])
def test_push_sum_keeps_the_mean_where_averaging_drifts(runs_dir: Path, network: tuple[str, str]) -> None:
    """The one-peer exponential graph (one-way links), models held fixed (consensus: no gradient): push-sum's mass
    Σ_i w_i z_i = Σ_i x_i equals K times the start's mean at every evaluation, and the z_i agree on that mean; the
    row-renormalised weights of `average` move the mean measurably."""
    start = _start_mean()
    norm = np.linalg.norm(start)
    push = _evals(_consensus(runs_dir, "push", "push-sum", *network))
    assert len(push) == CONSENSUS_ROUNDS // 50
    assert all(e["mass_shift"] * norm < 1e-12 for e in push)  # absolute, against the test's own mean
    assert push[-1]["mean_shift"] < 1e-12 and push[-1]["distance_to_initial_mean_peer_max"] < 1e-11
    avg = _evals(_consensus(runs_dir, "avg", "average", *network))
    drift = avg[-1]["mean_shift"] * norm / math.sqrt(CONSENSUS_D)
    assert drift > DRIFT_FLOOR, drift
    assert avg[-1]["distance_to_mean_peer_max"] < 1e-9  # it did agree, on a different value


# ------------------------------------------------------------------ every scheme under changing, failing networks

def _quadratic(runs_dir: Path, name: str, scheme: str, *extra: str, rounds: int = 30
               ) -> subprocess.CompletedProcess:
    return run_job(["-m", "p2pfl.run", "--algorithm", "quadratic", "--peers", str(K), "--rounds", str(rounds),
                    "--dim", str(D), "--lr", str(LR), "--seed", str(SEED), "--gossip", scheme, "--eval-every", "0",
                    "--out", str(runs_dir), "--name", name, "--no-progress", "--no-plots", *extra], ranks=0)


NETWORKS = {
    "link-failure": ("--topology", "cycle", "--link-failure", "0.3"),
    "participation": ("--topology", "cycle", "--participation", "0.6"),
    "churn": ("--topology", "cycle", "--churn", "0.2"),
    "crash": ("--topology", "cycle", "--crash", "3@5,6@12"),
    "resampled": ("--topology", "random", "--p", "0.5", "--resample"),
    "one-way": ("--topology", "one-peer-exponential", "--link-failure", "0.2"),
}


@pytest.mark.parametrize("network", sorted(NETWORKS))
def test_every_scheme_runs_on_changing_networks(runs_dir: Path, network: str) -> None:
    """Each scheme completes with a finite error every round (or is refused before training in one line: d2, naming
    exact diffusion, where some round's W has λ_min < −1/3, as on the resampled graph; relay on a graph that changes
    or has one-way links, its tree being fixed); the crash run
    records its crashed peers and push-sum's masses stay K (Σw) through every change. (Finite, not convergent: D²
    and exact diffusion carry no guarantee on row-stochastic one-way weights.)"""
    for scheme in SCHEMES:
        proc = _quadratic(runs_dir, scheme, scheme, *NETWORKS[network])
        if proc.returncode != 0 and scheme == "d2":
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 2 and len(lines) == 1 and "exact-diffusion" in lines[0], proc.stderr
            continue
        if scheme == "relay" and network in ("resampled", "one-way"):  # one fixed undirected tree, or refused
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 2 and len(lines) == 1 and "spanning tree" in lines[0], proc.stderr
            continue
        assert proc.returncode == 0, (scheme, proc.stderr[-3000:])
        rounds = _rounds(runs_dir / scheme)
        assert len(rounds) == 31 and all(math.isfinite(r["error"]) for r in rounds), scheme
        if network == "crash":
            assert rounds[-1]["network"]["crashed"] == [3, 6]
        if scheme == "push-sum":
            assert all(abs(r["weight_sum"] - K) < 1e-12 for r in rounds)


# ------------------------------------------------------------------ the trace equals a dense implementation

def _problem() -> tuple[np.ndarray, np.ndarray]:
    """SPEC §7's generator: a_i = (i + 1)/√K, b_i ~ N(0, 1/(i + 1)² I) from the stream (seed, i, "quadratic")."""
    from p2pfl.seeding import numpy_rng
    a = np.array([(i + 1) / math.sqrt(K) for i in range(K)])
    b = np.stack([numpy_rng(SEED, i, "quadratic").standard_normal(D) / (i + 1) for i in range(K)])
    return a, b


def _networks(options: dict, records: list[dict]) -> list:
    """The round networks of the run, rebuilt from its options and checked against its round records: the same
    active peers and link digest every round (so the dense implementation mixes over the network the run used)."""
    from p2pfl.config import make_config, resolve
    from p2pfl.network import NetworkOptions, NetworkSchedule
    from p2pfl.run import support_graph
    cfg = resolve(make_config(algorithm="quadratic", peers=K, seed=SEED, rounds=len(records) - 1, **options), 1).cfg
    schedule = NetworkSchedule.from_options(NetworkOptions.of(cfg), support_graph(cfg, K))
    nets = [schedule.at(t) for t in range(len(records))]
    for t, r in enumerate(records[1:], start=1):
        assert r["network"]["digest"] == nets[t].digest() and r["active"] == sorted(nets[t].active), t
    return nets


def _dense(scheme: str, nets: list, rounds: int) -> np.ndarray:
    """The error trace of gradient tracking or push-sum, SPEC §7's per-peer form: in round t only the active peers
    step and mix, over the links of the round's surviving network (A[i, j]: i hears from j) with its weights W_t;
    a peer sitting out keeps everything it holds."""
    a, b = _problem()
    xs = (a[:, None] * b).sum(0) / (a ** 2).sum()

    def grad(i: int, x: np.ndarray) -> np.ndarray:
        return a[i] * (a[i] * x - b[i])

    X, w = np.ones((K, D)), np.ones(K)
    WY, g_last = np.zeros((K, D)), [None] * K
    errors = [np.mean((X / w[:, None] - xs) ** 2)]
    for t in range(1, rounds + 1):
        net = nets[t]
        active = sorted(net.active)
        A, W = net.adjacency.toarray(), net.W.toarray()
        if scheme == "push-sum":
            out = A.sum(axis=0)
            sent = {j: (X[j] - LR * grad(j, X[j] / w[j]), w[j]) for j in active}
            sent = {j: (x / (1 + out[j]), v / (1 + out[j])) for j, (x, v) in sent.items()}
            X, w = X.copy(), w.copy()
            for i in active:
                X[i] = sent[i][0] + sum(sent[j][0] for j in active if A[i, j])
                w[i] = sent[i][1] + sum(sent[j][1] for j in active if A[i, j])
        else:
            g = {i: grad(i, X[i]) for i in active}
            y = {i: g[i] if g_last[i] is None else WY[i] + g[i] - g_last[i] for i in active}
            X_new, WY = X.copy(), WY.copy()
            for i in active:
                X_new[i] = sum(W[i, j] * (X[j] - LR * y[j]) for j in active if W[i, j] != 0)
                WY[i] = sum(W[i, j] * y[j] for j in active if W[i, j] != 0)
                g_last[i] = g[i]
            X = X_new
        errors.append(np.mean((X / w[:, None] - xs) ** 2))
    return np.array(errors)


@pytest.mark.parametrize("scheme,topology", [("gradient-tracking", "cycle"), ("push-sum", "one-peer-exponential"),
                                             ("push-sum", "cycle")])
def test_trace_under_link_failures_and_participation(runs_dir: Path, scheme: str, topology: str) -> None:
    """Links failing with probability 0.3 and 60% of the peers taking part each round: the run's error trace equals
    the dense implementation's over the networks its round records name, to 1e-12 relative."""
    options = {"topology": topology, "link_failure": 0.3, "participation": 0.6}
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in options.items()]
    proc = _quadratic(runs_dir, "run", scheme, *flags, rounds=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = _rounds(runs_dir / "run")
    nets = _networks(options, records)
    assert any(len(n.active) < K for n in nets[1:]) and any(n.links < nets[0].links for n in nets[1:])
    want = _dense(scheme, nets, 60)
    got = np.array([r["error"] for r in records])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


def test_consensus_push_sum_resumes_exactly(runs_dir: Path) -> None:
    """Consensus under push-sum keeps w in each peer's scheme state, checkpointed: stopped after round 3 and
    resumed, the records equal an uninterrupted run's bit for bit."""
    base = ["-m", "p2pfl.run", "--algorithm", "consensus", "--peers", str(K), "--vector-size", "20", "--vector-dtype",
            "float64", "--topology", "one-peer-exponential", "--link-failure", "0.3", "--gossip", "push-sum",
            "--eval-every", "1", "--checkpoint-every", "1", "--no-progress", "--no-plots"]
    full, resumed = resumed_and_uninterrupted(runs_dir, base, rounds=6, stop=3)
    numbers = [[r.get("metrics", r.get("consensus_distance")) for r in run] for run in (full, resumed)]
    assert numbers[1] == numbers[0] and len(numbers[0]) >= 12


def resumed_and_uninterrupted(runs_dir: Path, base: list[str], rounds: int, stop: int) -> tuple[list, list]:
    """The round and eval records of `base` run for `rounds` rounds, and of the same run stopped after `stop` and
    resumed to `rounds` (its --checkpoint-every must save at `stop`)."""
    for name, n in (("full", rounds), ("part", stop)):
        proc = run_job([*base, "--rounds", str(n), "--out", str(runs_dir), "--name", name], ranks=0)
        assert proc.returncode == 0, proc.stderr[-2000:]
    proc = run_job([*base, "--rounds", str(rounds), "--resume", str(runs_dir / "part")], ranks=0)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return tuple([r for r in _lines(runs_dir / run) if r["type"] in ("round", "eval")]  # type: ignore[return-value]
                 for run in ("full", "part"))
