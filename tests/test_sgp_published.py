"""SGP as its published code runs it (Assran et al. 2019; facebookresearch/stochastic_gradient_push): one push-sum
step per SGD step, to one peer of the one-peer exponential schedule (`--topology sgp-exponential`), Nesterov
momentum kept across iterations (`--nesterov --keep-optimizer`).

(a) who sends to whom at each iteration equals the reference's rule, written here from `gossip/graph_manager.py`
    (NPeerDynamicDirectedExponentialGraph, peers_per_itr = 1) and `gossip/gossiper.py` (group index 0 at the first
    mix, advanced by peers_per_itr after each), on 8, 16 and 24 peers over many iterations;
(b) a run sends one message a peer a round: K (d + 1) values a round in the bytes record (d the model's mixable
    values, + 1 the push-sum weight), K links, in-degree and out-degree 1;
(c) a round of the learner equals push-sum + Nesterov written here in float64, with the gradients the peers took.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import run_job
from helpers_inproc import setup_algorithm


def reference_out_peer(rank: int, world_size: int, itr: int, peers_per_itr: int = 1) -> list[int]:
    """The out-peers of `rank` at iteration `itr` (0-based) in the reference code, as read there: the phone book
    lists, for i = 0 .. int(log(K − 1, 2)), the peers j·(ppi + 1)^i ahead for j = 1 .. ppi (its dedup compares an
    int with Edge objects, so nothing is skipped); the gossiper starts at group indices [0 .. ppi − 1] and, after
    every mix, adds ppi to each, mod the phone book's length; the uniform mixing sends to every out-peer."""
    book = [(rank + j * (peers_per_itr + 1) ** i) % world_size
            for i in range(int(math.log(world_size - 1, peers_per_itr + 1)) + 1)
            for j in range(1, peers_per_itr + 1)]
    return [book[(g + itr * peers_per_itr) % len(book)] for g in range(peers_per_itr)]


@pytest.mark.parametrize("peers", [8, 16, 24])
def test_the_schedule_is_the_reference_codes(tmp_path: Path, peers: int) -> None:
    """Round t = itr + 1 of the run's schedule: peer i sends to exactly the reference's out-peer (i hears from j iff
    j's out-peer is i), for 5 full cycles of the hops and then some (also the one the run's P is built from)."""
    rounds = 5 * math.ceil(math.log2(peers)) + 3
    algo = setup_algorithm(tmp_path, algorithm="quadratic", peers=peers, dim=2, rounds=rounds, eval_every=0,
                           topology="sgp-exponential", gossip="push-sum")
    mirrored = 0
    for itr in range(rounds):
        hears = algo.ctx.schedule.at(itr + 1).adjacency.toarray() != 0  # hears[i, j]: i hears from j
        want = np.zeros((peers, peers), dtype=bool)
        for j in range(peers):
            for i in reference_out_peer(j, peers, itr):
                want[i, j] = True
        np.testing.assert_array_equal(hears, want, err_msg=f"iteration {itr} on {peers} peers")
        assert (hears.sum(0) == 1).all() and (hears.sum(1) == 1).all()  # one peer out, one in
        # one-peer-exponential is its mirror image: same hops, the other way round
        mirrored += (algo.ctx.schedule.at(itr + 1).adjacency.toarray() != 0).T.tolist() == _one_peer(peers, itr + 1)
    assert mirrored == rounds


def _one_peer(n: int, t: int) -> list[list[bool]]:
    from topologies.dynamic import exponential_links
    links = exponential_links(n, t)
    return [[links.has_edge(j, i) for j in range(n)] for i in range(n)]


def test_the_reference_rule_as_read() -> None:
    """The rule above on 8 peers, spelled out: hops 1, 2, 4, 1, 2, 4, … ahead; with 2 peers a round (not used
    here) the base is 3: 1, 2, 3, 6 ahead."""
    assert [reference_out_peer(5, 8, k)[0] for k in range(7)] == [6, 7, 1, 6, 7, 1, 6]
    assert [reference_out_peer(0, 24, k)[0] for k in range(6)] == [1, 2, 4, 8, 16, 1]
    assert reference_out_peer(0, 8, 0, peers_per_itr=2) == [1, 2]
    assert reference_out_peer(0, 8, 1, peers_per_itr=2) == [3, 6]


PUBLISHED = ["--gossip", "push-sum", "--topology", "sgp-exponential", "--optimizer", "sgd", "--momentum", "0.9",
             "--nesterov", "--keep-optimizer", "--local-steps", "1"]


def test_one_message_a_peer_a_round_in_the_bytes(runs_dir: Path) -> None:
    """FedAvg as published SGP, 8 peers, 4 rounds, float32: every round K = 8 links, each peer sends one message of
    its d mixable values plus the push-sum weight, (d + 1)·4 bytes, K (d + 1)·4 in all; the two-step variant
    (--gossip-steps 2) sends exactly twice that."""
    from p2pfl.algorithms.trainer import trainable

    def run(name: str, *extra: str) -> list[dict]:
        args = ["-m", "p2pfl.run", "--algorithm", "fedavg", "--dataset", "synthetic", "--peers", "8", "--rounds",
                "4", "--batch-size", "16", "--train-subset", "160", "--eval-every", "0", "--lr", "0.2",
                "--out", str(runs_dir), "--name", name, "--no-progress", "--no-plots", *PUBLISHED, *extra]
        done = run_job(args, ranks=0)
        assert done.returncode == 0, done.stderr
        lines = [json.loads(line) for line in (runs_dir / name / "metrics.jsonl").read_text().splitlines()]
        return [r for r in lines if r["type"] == "round" and r["round"] > 0]

    algo = setup_algorithm(runs_dir / "probe", algorithm="fedavg", peers=8, train_subset=160)
    model = algo.peers[0].model
    d = sum(v.numel() for v in model.state_dict().values() if v.is_floating_point())
    assert d == sum(p.numel() for p in trainable(model))  # no buffers: every mixable value is a parameter
    one, two = run("published"), run("two-step", "--gossip-steps", "2")
    assert len(one) == 4
    for r in one:
        assert r["network"]["links"] == 8 and set(r["network"]["degree"].values()) == {1}
        assert r["bytes_sent_per_peer"] == {str(p): (d + 1) * 4 for p in range(8)}
        assert r["bytes_sent"] == 8 * (d + 1) * 4
    assert [r["bytes_sent"] for r in two] == [2 * 8 * (d + 1) * 4] * 4


LR, MU = 0.2, 0.9


@pytest.mark.parametrize("link_failure,weight_decay", [(0.0, 1e-3), (0.3, 0.0)])
def test_a_round_is_push_sum_of_a_nesterov_step(tmp_path: Path, link_failure: float, weight_decay: float) -> None:
    """FedAvg, float64, 4 peers on sgp-exponential, 4 rounds of one local step: with g_i the gradient peer i took
    at its model z_i (read between backward and step), the test computes torch's Nesterov (dampening 0)
    buf_i ← μ buf_i + g_i + λ z_i, d_i = g_i + λ z_i + μ buf_i, then push-sum as the reference runs it, the step
    taken on the numerator: [x, w]⁺ = P_t [w_i z_i − η d_i, w_i], P_t column-stochastic from the round's surviving
    links (a sender keeps 1/(1 + out-degree) and sends as much on each link), z⁺ = x⁺/w⁺. Without failures (the
    published setting) w stays 1; with links failing w leaves 1 and weight decay is off (the reference decays the
    numerator, λ x, p2pfl's optimiser the model, λ z: equal while w = 1). Each coordinate is a few float64
    operations on values of order 1 (a few ulps, ~1e-16); 1e-12 leaves a factor 1000 and still tells a dropped
    momentum (η μ buf, ≥ 1e-3 here), a step scaled by w or a second gossip step apart."""
    from p2pfl.runtime.precision import precision
    with precision("float64"):  # as p2pfl.run runs --dtype float64
        moved = _push_sum_of_nesterov(tmp_path, link_failure, weight_decay)
    assert moved == (link_failure > 0), "the weights leave 1 exactly when links fail"


def _push_sum_of_nesterov(tmp_path: Path, link_failure: float, wd: float) -> bool:
    k = 4
    algo = setup_algorithm(tmp_path, algorithm="fedavg", peers=k, rounds=4, eval_every=0, dtype="float64",
                           batch_size=8, train_subset=64, batch_peers="off", gossip="push-sum",
                           topology="sgp-exponential", link_failure=link_failure, optimizer="sgd", lr=LR,
                           momentum=MU, nesterov=True, keep_optimizer=True, weight_decay=wd, local_steps=1)
    from p2pfl.algorithms.trainer import trainable

    def flat(p: int) -> np.ndarray:
        assert all(v.dtype == torch.float64 for v in trainable(algo.peers[p].model))
        return torch.cat([v.detach().flatten() for v in trainable(algo.peers[p].model)]).numpy().copy()

    grads: dict[int, np.ndarray] = {}
    plain = algo.after_backward

    def record(peer) -> None:
        grads[peer.id] = torch.cat([v.grad.flatten() for v in trainable(peer.model)]).numpy().copy()
        plain(peer)

    algo.after_backward = record
    buf: dict[int, np.ndarray] = {}
    w = np.ones(k)
    moved = False
    for t in range(1, 5):
        Z = np.stack([flat(p) for p in range(k)])
        net = algo.ctx.schedule.at(t)
        algo.local_updates(sorted(algo.peers), t, net)
        algo.communicate(t, net)
        sent = np.empty_like(Z)
        for p in range(k):
            g = grads[p] + wd * Z[p]
            buf[p] = g.copy() if p not in buf else MU * buf[p] + g
            sent[p] = w[p] * Z[p] - LR * (g + MU * buf[p])
        hears = net.adjacency.toarray() != 0  # hears[i, j]: i hears from j
        P = (hears | np.eye(k, dtype=bool)) / (1 + hears.sum(0))
        x, w = P @ sent, P @ w
        got = np.stack([flat(p) for p in range(k)])
        np.testing.assert_allclose(got, x / w[:, None], rtol=0, atol=1e-12, err_msg=f"round {t}")
        got_w = np.array([float(algo.peers[p].scheme["w"]) for p in range(k)])
        np.testing.assert_allclose(got_w, w, rtol=0, atol=1e-15)
        moved |= bool(np.abs(w - 1).max() > 1e-3)
        grads.clear()
    return moved
