"""--gossip-steps S: the scheme's round, then S − 1 pure gossip steps on the same round's network. On the quadratic
problem (float64, exact gradients) one round equals the test's own dense computation: W_t W_t (X − ηG) for the
plain average (W built here from the graph by the Metropolis rule), its γ-lazy form for dense CHOCO, and P_t P_t
[X − ηG, w] for push-sum on a one-way graph with failing links (P_t built here from the round's links). S = 2 sends
exactly twice the bytes of S = 1 and pays each link's latency twice on the simulated clock; the schemes whose state
would advance are refused in one line."""
from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from helpers_inproc import setup_algorithm

K, D, LR = 8, 5, 0.05


def _quadratic(out: Path, **options):
    return setup_algorithm(out, algorithm="quadratic", peers=K, dim=D, lr=LR, rounds=3, eval_every=0, **options)


def _start(algo) -> tuple[np.ndarray, np.ndarray]:
    """The peers' iterates X (K × d) and gradients G at their models (the problem's A_i = a_i I and b_i are the
    input, read off the peers; G_i = a_i (a_i z_i − b_i) computed here)."""
    X = np.stack([algo.peers[p].x.cpu().numpy() for p in range(K)])
    Z = np.stack([algo.ctx.scheme.model(algo.peers[p].x, algo.peers[p].scheme).cpu().numpy() for p in range(K)])
    a = np.array([float(algo.peers[p].A) for p in range(K)])[:, None]
    b = np.stack([algo.peers[p].b.cpu().numpy() for p in range(K)])
    return X, a * (a * Z - b)


def _round(algo, t: int) -> None:
    net = algo.ctx.schedule.at(t)
    algo.local_updates(sorted(algo.peers), t, net)
    algo.communicate(t, net)


def _iterates(algo) -> np.ndarray:
    return np.stack([algo.peers[p].x.cpu().numpy() for p in range(K)])


def _metropolis(graph: nx.Graph) -> np.ndarray:
    """W_ij = 1/(1 + max(d_i, d_j)) on the edges, the rest of each row on the diagonal."""
    W = np.zeros((K, K))
    for i, j in graph.edges:
        W[i, j] = W[j, i] = 1 / (1 + max(graph.degree[i], graph.degree[j]))
    return W + np.diag(1 - W.sum(1))


@pytest.mark.parametrize("topology", ["cycle", "random"])
def test_two_steps_are_w_applied_twice(tmp_path: Path, topology: str) -> None:
    """D-PSGD with S = 2: X⁺ = W(W(X − ηG)) to 1e-12 over three rounds, and not W(X − ηG)."""
    algo = _quadratic(tmp_path, topology=topology, gossip_steps=2)
    W = _metropolis(nx.Graph(algo.ctx.graph))
    assert np.allclose(W, algo.ctx.schedule.at(1).W.toarray())  # the run mixes by the rule this test wrote
    for t in (1, 2, 3):
        X, G = _start(algo)
        _round(algo, t)
        want = W @ (W @ (X - LR * G))
        np.testing.assert_allclose(_iterates(algo), want, rtol=1e-12, atol=1e-14)
        assert np.abs(_iterates(algo) - W @ (X - LR * G)).max() > 1e-6


def test_dense_choco_repeats_its_gossip_step(tmp_path: Path) -> None:
    """Dense CHOCO with γ = 0.5: a round is x½ + γ(W − I)x½, its g = 0 repeat a CHOCO-gossip step, so
    X⁺ = W_γ W_γ (X − ηG), W_γ = (1 − γ)I + γW."""
    algo = _quadratic(tmp_path, topology="cycle", gossip="choco", consensus_step=0.5, gossip_steps=2)
    Wg = 0.5 * np.eye(K) + 0.5 * _metropolis(nx.Graph(algo.ctx.graph))
    for t in (1, 2):
        X, G = _start(algo)
        _round(algo, t)
        np.testing.assert_allclose(_iterates(algo), Wg @ (Wg @ (X - LR * G)), rtol=1e-12, atol=1e-14)


def test_push_sum_mixes_x_and_w_twice_on_a_one_way_graph(tmp_path: Path) -> None:
    """Push-sum with S = 2 on the one-peer exponential graph (one-way, a new graph each round) with links failing:
    [x, w]⁺ = P_t(P_t [x − ηg, w]), P_t column-stochastic from the round's surviving links (built here: j splits
    its mass evenly over itself and the peers that hear from it); the peers hold z = x/w."""
    algo = _quadratic(tmp_path, topology="one-peer-exponential", gossip="push-sum", link_failure=0.3,
                      gossip_steps=2)
    w = np.ones((K, 1))
    moved = False
    for t in (1, 2, 3):
        X, G = _start(algo)
        hears = algo.ctx.schedule.at(t).adjacency.toarray() != 0  # hears[i, j]: i hears from j
        P = (hears | np.eye(K, dtype=bool)) / (1 + hears.sum(0))
        want, w = P @ (P @ (X - LR * G)), P @ (P @ w)
        _round(algo, t)
        np.testing.assert_allclose(_iterates(algo), want, rtol=1e-12, atol=1e-14)
        got_w = np.array([[float(algo.peers[p].scheme["w"])] for p in range(K)])
        np.testing.assert_allclose(got_w, w, rtol=1e-12)
        moved |= bool(np.abs(w - 1).max() > 1e-3)
    assert moved, "the weights should leave 1 for the test to tell x from z"


@pytest.mark.parametrize("scheme", ["average", "push-sum"])
def test_consensus_mixes_twice(tmp_path: Path, scheme: str) -> None:
    """Consensus (G = 0) on the ring: X⁺ = W²X for the plain average (the scheme's path under S > 1, not the
    plain mix's), and the same for push-sum, whose weights stay 1 on a regular graph."""
    algo = setup_algorithm(tmp_path, algorithm="consensus", peers=K, topology="cycle", gossip=scheme, vector_size=7,
                           vector_dtype="float64", gossip_steps=2)
    W = _metropolis(nx.Graph(algo.ctx.graph)) if scheme == "average" else _ring_push()
    X = np.stack([algo.peers[p].x.cpu().numpy() for p in range(K)])
    algo.communicate(1, algo.ctx.schedule.at(1))
    got = np.stack([algo.peers[p].x.cpu().numpy() for p in range(K)])
    np.testing.assert_allclose(got, W @ (W @ X), rtol=1e-12, atol=1e-14)


def _ring_push() -> np.ndarray:
    """Push-sum's P on the ring: each peer keeps a third and sends a third to either neighbour."""
    return (np.eye(K) + np.roll(np.eye(K), 1, axis=1) + np.roll(np.eye(K), -1, axis=1)) / 3


def _run(runs_dir: Path, name: str, *extra: str) -> list[dict]:
    from p2pfl.run import main
    args = ["--algorithm", "quadratic", "--peers", str(K), "--dim", str(D), "--rounds", "2", "--topology", "cycle",
            "--eval-every", "0", "--latency", "0.01", "--compute-time", "0.001", "--out", str(runs_dir),
            "--name", name, "--no-progress", "--no-plots", *extra]
    assert main(args) == 0
    lines = [json.loads(line) for line in (runs_dir / name / "metrics.jsonl").read_text().splitlines()]
    return [r for r in lines if r["type"] == "round"][1:]


@pytest.mark.parametrize("scheme", ["average", "push-sum"])
def test_two_steps_send_twice_the_bytes_and_pay_the_latency_twice(runs_dir: Path, scheme: str) -> None:
    """Each peer sends its d float64 (push-sum: d + 1) to its 2 ring neighbours once a step; the simulated round is
    one local step (1 ms) plus S latencies of 10 ms."""
    one = _run(runs_dir, f"{scheme}-1", "--gossip", scheme)
    two = _run(runs_dir, f"{scheme}-2", "--gossip", scheme, "--gossip-steps", "2")
    per_step = K * 2 * (D + (scheme == "push-sum")) * 8
    assert [r["bytes_sent"] for r in one] == [per_step] * 2
    assert [r["bytes_sent"] for r in two] == [2 * per_step] * 2
    assert [r["sim_round_s"] for r in one] == pytest.approx([0.011] * 2, rel=1e-12)
    assert [r["sim_round_s"] for r in two] == pytest.approx([0.021] * 2, rel=1e-12)


def test_a_learner_sends_twice_the_bytes(runs_dir: Path) -> None:
    """FedAvg's peers (plain average, the scheme's path under S > 1): twice the bytes, and the mix is W²: with one
    round from a common start, the models after two steps differ from one step's."""
    from p2pfl.run import main

    def run(name: str, *extra: str) -> list[dict]:
        args = ["--algorithm", "fedavg", "--dataset", "synthetic", "--peers", "4", "--rounds", "1", "--topology",
                "cycle", "--local-steps", "2", "--batch-size", "16", "--train-subset", "200", "--eval-every", "0",
                "--out", str(runs_dir), "--name", name, "--no-progress", "--no-plots", *extra]
        assert main(args) == 0
        lines = [json.loads(line) for line in (runs_dir / name / "metrics.jsonl").read_text().splitlines()]
        return [r for r in lines if r["type"] == "round"]

    one, two = run("s1"), run("s2", "--gossip-steps", "2")
    assert two[-1]["bytes_sent"] == 2 * one[-1]["bytes_sent"] > 0
    assert two[-1]["consensus_distance"] < one[-1]["consensus_distance"]


def _refusal(**options) -> str:
    from p2pfl.config import ConfigError, make_config
    with pytest.raises(ConfigError) as exc:
        make_config(**{"algorithm": "quadratic", "peers": K, **options})
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_schemes_whose_state_advances_are_refused() -> None:
    for scheme in ("gradient-tracking", "d2", "exact-diffusion", "qgm", "relay"):
        message = _refusal(gossip=scheme, gossip_steps=2, topology="cycle")
        assert message.startswith("--gossip-steps:") and f"--gossip {scheme}" in message, message
        assert all(name in message for name in ("average", "push-sum", "choco")), message


def test_other_refusals() -> None:
    assert _refusal(gossip_steps=0).startswith("--gossip-steps:")
    assert "--compress" in _refusal(gossip_steps=2, compress="top-k")
    assert "--byzantine" in _refusal(algorithm="dec-sl", gossip_steps=2, byzantine="1", aggregator="trimmed-mean")
    message = _refusal(algorithm="scaffold", gossip_steps=2)
    assert message.startswith("--gossip-steps:") and "scaffold" in message
    message = _refusal(algorithm="dec-sl", gossip_steps=2, mode="async", compute_time=0.1)
    assert message.startswith("--gossip-steps:") and "async" in message


def test_one_step_is_the_default() -> None:
    from p2pfl.config import make_config
    assert make_config(algorithm="quadratic").gossip_steps == 1


def test_the_option_is_the_multi_step_schemes_own_and_keeps_its_flag_key_and_record(tmp_path: Path) -> None:
    """--gossip-steps is declared by the schemes that declare MULTI_STEP (their base's options), no other scheme's
    and not the core's; its flag, YAML key, config.yaml and manifest entry are what they were."""
    import dataclasses

    from p2pfl.cli import parse_args
    from p2pfl.config import RunConfig, to_yaml
    from p2pfl.gossip.schemes import SCHEMES
    from p2pfl.gossip.schemes.base import MULTI_STEP
    from p2pfl.registry import options_class

    declaring = {n for n in SCHEMES.names() if "gossip_steps" in
                 {f.name for f in dataclasses.fields(options_class(SCHEMES.get(n)) or RunConfig)}}
    assert declaring == {n for n in SCHEMES.names() if MULTI_STEP in SCHEMES.get(n).capabilities}
    assert {"average", "push-sum", "choco"} <= declaring and "d2" not in declaring
    assert "gossip_steps" not in {f.name for f in dataclasses.fields(RunConfig)}
    config = tmp_path / "c.yaml"
    config.write_text("algorithm: quadratic\ngossip: push-sum\ngossip_steps: 3\n")
    from_flag, _ = parse_args(["--algorithm", "quadratic", "--gossip", "push-sum", "--gossip-steps", "3"])
    from_file, _ = parse_args(["--config", str(config)])
    assert from_flag.gossip_steps == from_file.gossip_steps == 3 and from_flag == from_file
    assert from_flag.to_dict()["gossip_steps"] == 3 and "\ngossip_steps: 3\n" in to_yaml(from_flag)
