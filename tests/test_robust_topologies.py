"""Robust gossip on every neighbourhood size, and the omniscient attacks as published, each against an
expectation computed here: clipped-gossip and trimmed-mean keep a leaf's only neighbour (a star then converges at
gossip's rate), a neighbourhood too small for --trim takes the median, ALIE's z is Baruch's, ALIE's and
dissensus's messages are the papers' formulas of the receiver's current honest neighbours, and an attacked run
is the same on 1 and 2 ranks."""
from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import NormalDist

import networkx as nx
import pytest
import torch

from p2pfl.byzantine import Robust, aggregate, alie_z
from p2pfl.comm import Placement, Transport, World
from p2pfl.gossip import CheckedExchange, Gossip
from p2pfl.network import NetworkSchedule
from p2pfl.run import main

from conftest import run_job, timing_free_records

# ---------------------------------------------------------------------------------------------- small neighbourhoods

STAR_TREE = ["--algorithm", "consensus", "--peers", "7", "--rounds", "40", "--vector-size", "1000", "--vector-dtype",
             "float64", "--trim", "1", "--eval-every", "0", "--no-progress", "--no-plots"]
LEAVES = {"star": [1, 2, 3, 4, 5, 6], "binary-tree": [3, 4, 5, 6]}


def _rounds(tmp_path: Path, topology: str, aggregator: str) -> list[dict]:
    name = f"{topology}-{aggregator}"
    assert main([*STAR_TREE, "--topology", topology, "--aggregator", aggregator, "--out", str(tmp_path),
                 "--name", name]) == 0
    lines = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    return [r for r in lines if r["type"] == "round"]


@pytest.mark.parametrize("topology", ["star", "binary-tree"])
def test_a_leaf_keeps_its_only_neighbour(tmp_path: Path, topology: str) -> None:
    """No attacker, --trim 1. A leaf (one neighbour) can assume no attacker: it is never clipped or trimmed and
    the records say its trim was lowered to 0. On the star that is all it takes: the hub clips or trims one of
    six, and both aggregators shrink the consensus distance in 40 rounds at least as fast as half of gossip's
    exponential rate (ratio <= mean's ratio ** 0.5; gossip falls to 3.7e-6 of the start, the old clipped radius 0
    left the leaves where they started, 0.71). On the tree the leaves follow their parent, but a node whose two
    children agree with it rightly treats its parent as the one outlier (a tree is not robust enough for
    --trim 1), so both aggregators stall short of consensus there (docs/robustness.md)."""
    mean = _rounds(tmp_path, topology, "mean")
    mean_ratio = mean[-1]["consensus_distance"] / mean[0]["consensus_distance"]
    for aggregator in ("clipped-gossip", "trimmed-mean"):
        rounds = _rounds(tmp_path, topology, aggregator)
        for r in rounds[1:]:
            assert r["trim_lowered"] == [[leaf, 0] for leaf in LEAVES[topology]], (aggregator, r["round"])
            assert not [pair for pair in r["cut"] if pair[0] in LEAVES[topology]], (aggregator, r["round"])
        if topology == "star":
            ratio = rounds[-1]["consensus_distance"] / rounds[0]["consensus_distance"]
            assert ratio <= mean_ratio ** 0.5, (aggregator, ratio, mean_ratio)
    assert "trim_lowered" not in mean[1]  # only robust runs carry it


def _neighbourhood(n: int, d: int = 33, seed: int = 0) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    own = torch.randn(d, generator=gen, dtype=torch.float64)
    return own, {j: torch.randn(d, generator=gen, dtype=torch.float64) * j for j in range(1, n)}


def test_clipped_gossip_with_few_neighbours_clips_all_but_the_nearest() -> None:
    """One neighbour: the gossip step itself. m <= trim neighbours: each difference clipped to the nearest's
    length (the nearest kept whole), in the weighted step x_i + Σ_j W_ij clip(x_j − x_i, τ)."""
    own, received = _neighbourhood(2)
    row = [(0, 0.5), (1, 0.5)]
    out, cut = aggregate(Robust(frozenset(), aggregator="clipped-gossip", trim=1), 0, own, received, row)
    assert torch.equal(out, 0.5 * own + 0.5 * received[1]) and cut == []
    own, received = _neighbourhood(3)
    row = [(0, 0.4), (1, 0.3), (2, 0.3)]
    nearest = min(float((v - own).norm()) for v in received.values())
    want = own.clone()
    for j, w in row[1:]:
        diff = received[j] - own
        want += w * diff * min(1.0, nearest / float(diff.norm()))
    for trim in (2, 3):
        out, cut = aggregate(Robust(frozenset(), aggregator="clipped-gossip", trim=trim), 0, own, received, row)
        torch.testing.assert_close(out, want)
        assert len(cut) == 1


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7])
def test_a_neighbourhood_too_small_for_the_trim_takes_the_median(n: int) -> None:
    """n < 2·trim + 1 values: the trim falls to (n − 1)//2, the middle value (odd n) or the mean of the middle two
    (even n) of each coordinate, as a sort of the column says."""
    own, received = _neighbourhood(n, seed=n)
    columns = torch.stack([own, *received.values()]).T.tolist()
    want = torch.tensor([(sorted(c)[(n - 1) // 2] + sorted(c)[n // 2]) / 2 for c in columns], dtype=torch.float64)
    for trim in range((n - 1) // 2 + 1, n + 1):  # every trim with n < 2·trim + 1
        out, _ = aggregate(Robust(frozenset(), aggregator="trimmed-mean", trim=trim), 0, own, received, [])
        torch.testing.assert_close(out, want, rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------------------------ ALIE


@pytest.mark.parametrize("n,f", [(16, 2), (50, 12), (4, 1), (6, 2), (7, 1), (8, 3), (10, 5), (20, 1), (21, 4)])
def test_alie_z_is_baruchs(n: int, f: int) -> None:
    """z = Φ⁻¹((n − s)/n), s = ⌊n/2 + 1⌋ − f over all n peers and the f attackers (Baruch et al. 2019)."""
    s = n // 2 + 1 - f
    assert alie_z(n, f) == pytest.approx(NormalDist().inv_cdf((n - s) / n), abs=1e-15)


def test_alie_z_published_points() -> None:
    assert alie_z(16, 2) == pytest.approx(0.157, abs=5e-4)
    assert alie_z(50, 12) == pytest.approx(0.583, abs=5e-4)
    with pytest.raises(ValueError, match="alie"):
        alie_z(10, 6)  # a Byzantine majority needs no supporters: no z


# A small graph with unequal degrees; 2 and 5 attack.
EDGES = [(0, 1), (0, 2), (0, 3), (1, 2), (2, 3), (3, 4), (4, 5), (2, 5), (1, 5)]
K, BYZANTINE, D = 6, frozenset({2, 5}), 40


def _gossip(attack: str, aggregator: str = "mean", scale: float = 1.0):
    graph = nx.Graph(EDGES)
    world = World.detect()
    transport = Transport(world, graph, Placement(K, 1), timeout=30)
    robust = Robust(BYZANTINE, attack=attack, scale=scale, aggregator=aggregator, peers=K)
    gossip = Gossip(CheckedExchange(transport, world), robust, seed=0)
    net = NetworkSchedule(K, graph=graph).at(1)
    gen = torch.Generator().manual_seed(1)
    vectors = {p: torch.randn(D, generator=gen, dtype=torch.float64) for p in range(K)}
    return gossip, transport, net, vectors


def _honest_neighbours(net, p: int) -> list[int]:
    return sorted(j for j in net.incoming[p] if j not in BYZANTINE)


def test_alie_sends_each_receiver_mu_minus_z_sigma_of_its_honest_neighbours() -> None:
    """What honest i reads from an attacker: μ − z·σ (population σ) over i's own vector and the vectors its honest
    neighbours send this round, z for 2 attackers among 6; the bytes on the wire are those of plain gossip;
    under the mean, i's step is Σ_j W_ij m_j with those messages."""
    gossip, transport, net, vectors = _gossip("alie")
    z = NormalDist().inv_cdf((K - (K // 2 + 1 - len(BYZANTINE))) / K)
    got = gossip.checked.exchange(vectors, 1, net.incoming, net=net, valid=None,
                                  tamper=gossip.adversary(vectors, net))
    expected = {}
    for p in sorted(set(range(K)) - BYZANTINE):
        stack = torch.stack([vectors[p], *(vectors[j] for j in _honest_neighbours(net, p))])
        expected[p] = stack.mean(0) - z * stack.std(0, unbiased=False)
        for j in net.incoming[p]:
            want = expected[p] if j in BYZANTINE else vectors[j]
            torch.testing.assert_close(got.inbox[p][j], want, rtol=0, atol=1e-12)
    for b in BYZANTINE:  # attackers hear the truth
        assert all(torch.equal(v, vectors[j]) for j, v in got.inbox[b].items())
    got.release()
    assert sum(transport.stats.peer_sent.values()) == 2 * len(EDGES) * D * 8
    mixed = gossip.mix(vectors, net, 2, memory=lambda p: {})
    for p, want_msg in expected.items():
        want = sum(w * (want_msg if j in BYZANTINE else vectors[j]) for j, w in net.row(p))
        torch.testing.assert_close(mixed.vectors[p], want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_dissensus_sends_the_papers_vector_and_reverses_the_honest_pull(eps: float) -> None:
    """He et al. 2022: Byzantine neighbours of i send x_i − ε·Σ_k W_ik (x_k − x_i) / Σ_j W_ij (k honest, j
    Byzantine); under the mean, i's step becomes x_i + (1 − ε)·Σ_k W_ik (x_k − x_i)."""
    gossip, _, net, vectors = _gossip("dissensus", scale=eps)
    got = gossip.checked.exchange(vectors, 1, net.incoming, net=net, valid=None,
                                  tamper=gossip.adversary(vectors, net))
    mixed = gossip.mix(vectors, net, 2, memory=lambda p: {})
    for p in sorted(set(range(K)) - BYZANTINE):
        weights = dict(net.row(p))
        pull = sum(weights[k] * (vectors[k] - vectors[p]) for k in _honest_neighbours(net, p))
        byzantine = [j for j in net.incoming[p] if j in BYZANTINE]
        want = vectors[p] - eps * pull / sum(weights[j] for j in byzantine)
        for j in byzantine:
            torch.testing.assert_close(got.inbox[p][j], want, rtol=0, atol=1e-12)
        torch.testing.assert_close(mixed.vectors[p], vectors[p] + (1 - eps) * pull, rtol=0, atol=1e-12)
    got.release()


# ----------------------------------------------------------------------------------------------------- placement


@pytest.mark.parametrize("attack", ["alie", "dissensus"])
def test_an_omniscient_attack_run_is_the_same_on_one_and_two_ranks(runs_dir: Path, attack: str) -> None:
    args = ["-m", "p2pfl.run", "--algorithm", "consensus", "--peers", "8", "--topology", "random", "--p", "0.5",
            "--rounds", "5", "--vector-size", "500", "--vector-dtype", "float64", "--byzantine", "2", "--attack",
            attack, "--attack-scale", "1.5", "--aggregator", "trimmed-mean", "--eval-every", "0", "--no-progress",
            "--no-plots", "--out", str(runs_dir)]
    for ranks, name in ((2, "two"), (0, "one")):
        proc = run_job([*args, "--name", name], ranks=ranks)
        assert proc.returncode == 0, proc.stderr[-3000:]
    two = timing_free_records(runs_dir / "two")
    assert two == timing_free_records(runs_dir / "one")
    assert math.isfinite(two[-1]["metrics"]["distance_to_initial_mean_peer_max"])
