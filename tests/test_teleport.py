"""Teleportation (topologies.teleport, Takezawa and Stich 2025): k active peers a round, drawn from the stream
(seed, SHARED, "teleport/t"), take the k models from the round before's holders and gossip on the inner graph among
themselves; the others keep their last model. Consensus in float64 against a brute-force simulation written here
from that description; one message per moved model counted; records equal on 1 and 2 ranks; what cannot move with
the model refused in one line; the flags --active and --inner."""
from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

import topologies
from p2pfl.network import NetworkSchedule
from topologies import TopologyError
from topologies.streams import stream_seed

from conftest import run_job, timing_free_records
from helpers_inproc import setup_algorithm


def drawn(n: int, k: int, seed: int, t: int) -> list[int]:
    """Round t's slot holders as the module docstring defines them: k distinct peers, in draw order."""
    return np.random.default_rng(stream_seed(seed, -1, f"teleport/{t}")).choice(n, size=k, replace=False).tolist()


def metropolis(g: nx.Graph) -> np.ndarray:
    """Metropolis weights on a graph (SPEC §1), written out here."""
    k = g.number_of_nodes()
    w = np.zeros((k, k))
    for a, b in g.edges:
        w[a, b] = w[b, a] = 1.0 / (1 + max(g.degree[a], g.degree[b]))
    w[np.diag_indices(k)] = 1.0 - w.sum(axis=1)
    return w


def brute_force(x: np.ndarray, rounds: int, k: int, seed: int, inner: nx.Graph) -> np.ndarray:
    """The peers' vectors after `rounds` rounds: slot i's model goes from round t−1's i-th holder to round t's, then
    the holders mix by Metropolis on the inner graph over the slots; no one else changes."""
    x = x.copy()
    w = metropolis(inner)
    before = None
    for t in range(1, rounds + 1):
        now = drawn(len(x), k, seed, t)
        if before is not None:
            x[now] = x[before]  # every slot's model moves at once (fancy indexing copies the right side first)
        x[now] = w @ x[now]
        before = now
    return x


@pytest.mark.parametrize(("n", "k", "inner"), [(8, 3, "cycle"), (12, 5, "cycle"), (10, 4, "star"), (6, 6, "cycle")])
def test_consensus_follows_the_brute_force_simulation(tmp_path: Path, n: int, k: int, inner: str) -> None:
    algo = setup_algorithm(tmp_path, algorithm="consensus", peers=n, topology="teleport",
                           topology_params=f"active={k},inner={inner}", vector_size=5, vector_dtype="float64", seed=7)
    x0 = np.stack([algo.peers[p].x.numpy() for p in range(n)])
    rounds = 9
    for t in range(1, rounds + 1):
        net = algo.ctx.schedule.at(t)
        assert net.active == frozenset(drawn(n, k, 7, t))
        algo.handover(t, net)
        algo.communicate(t, net)
    got = np.stack([algo.peers[p].x.numpy() for p in range(n)])
    want = brute_force(x0, rounds, k, 7, topologies.build(inner, k))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
    untouched = set(range(n)) - {p for t in range(1, rounds + 1) for p in drawn(n, k, 7, t)}
    for p in untouched:  # a peer never drawn keeps its own start, bit for bit
        assert np.array_equal(got[p], x0[p])


def test_the_round_hands_each_slot_on_and_links_only_its_holders() -> None:
    sched = NetworkSchedule(20, seed=3, dynamic=topologies.DYNAMIC["teleport"].bind(active=5))
    assert sched.at(1).handover == {}
    for t in (2, 3, 9):
        before, now = drawn(20, 5, 3, t - 1), drawn(20, 5, 3, t)
        net = sched.at(t)
        assert net.handover == {i: j for i, j in zip(now, before) if i != j}
        assert not net.rejoining & net.handover.keys()  # a receiver takes its model, not its neighbours' mix
        a = net.adjacency.toarray()
        want = np.zeros((20, 20))
        for s in range(5):  # the inner cycle over the slots, both ways
            want[now[s], now[(s + 1) % 5]] = want[now[(s + 1) % 5], now[s]] = 1
        np.testing.assert_array_equal(a, want)
        np.testing.assert_allclose(net.W.toarray().sum(axis=1), 1.0, rtol=0, atol=1e-15)


CONSENSUS = ["-m", "p2pfl.run", "--algorithm", "consensus", "--peers", "9", "--vector-size", "10", "--vector-dtype",
             "float64", "--eval-every", "0", "--no-progress", "--no-plots", "--seed", "5", "--rounds", "4",
             "--topology", "teleport"]


def test_records_on_one_and_two_ranks_agree_and_count_each_moved_model(tmp_path: Path) -> None:
    """K = 9, k = 4 given as its own flags; bytes a round = (models moved + the inner cycle's 8 links) × 80."""
    for ranks, name in ((2, "two"), (0, "one")):
        proc = run_job([*CONSENSUS, "--active", "4", "--inner", "cycle", "--out", str(tmp_path), "--name", name],
                       ranks=ranks)
        assert proc.returncode == 0, proc.stderr[-3000:]
    one = timing_free_records(tmp_path / "one")
    assert one == timing_free_records(tmp_path / "two")
    rounds = [r for r in one if r["type"] == "round" and r["round"] > 0]
    moved = [0] + [sum(i != j for i, j in zip(drawn(9, 4, 5, t), drawn(9, 4, 5, t - 1))) for t in range(2, 5)]
    assert sum(moved) > 0
    assert [r["bytes_sent"] for r in rounds] == [(m + 8) * 80 for m in moved]
    manifest = json.loads((tmp_path / "one" / "manifest.json").read_text())
    assert (manifest["config"]["active"], manifest["config"]["inner"]) == (4, "cycle")


@pytest.mark.parametrize(("algorithm", "extra", "says"), [
    ("quadratic", ("--gossip", "gradient-tracking"), "--gossip gradient-tracking: --topology teleport hands"),
    ("quadratic", ("--gossip", "choco"), "--gossip choco: --topology teleport hands"),
    ("quadratic", ("--gossip", "push-sum"), "--gossip push-sum: --topology teleport hands"),
    ("consensus", ("--mode", "async", "--compute-time", "1"), "--mode async: averages pairwise over a static"),
    ("local", (), "--topology teleport: hands each peer's model to another peer, but local cannot"),
    ("quadratic", ("--active", "1"), "active must be an integer in [2, K]"),
    ("quadratic", ("--active", "3", "--inner", "nowhere"), "inner must name a static topology"),
])
def test_what_cannot_run_on_it_is_refused_in_one_line(tmp_path: Path, algorithm: str, extra: tuple[str, ...],
                                                      says: str) -> None:
    args = ["-m", "p2pfl.run", "--algorithm", algorithm, "--peers", "8", "--rounds", "2", "--topology", "teleport",
            "--out", str(tmp_path), "--no-progress", "--no-plots", *extra]
    if "--active" not in extra:
        args += ["--active", "3"]
    proc = run_job(args, ranks=0)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and says in lines[-1], proc.stderr


def test_dsgd_on_the_quadratic_runs_and_approaches_the_optimum(tmp_path: Path) -> None:
    """The plain mix with gradients: the k models train as they move; the error of the peers drawn last falls."""
    args = ["-m", "p2pfl.run", "--algorithm", "quadratic", "--peers", "12", "--rounds", "200", "--topology",
            "teleport", "--active", "4", "--lr", "0.05", "--out", str(tmp_path), "--name", "r", "--no-progress",
            "--no-plots", "--eval-every", "0"]
    proc = run_job(args, ranks=0)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    error = [r["error"] for r in lines if r["type"] == "round"]
    assert error[-1] < error[0] / 10, (error[0], error[-1])


def test_bad_options_are_named() -> None:
    with pytest.raises(TopologyError, match="active must be an integer"):
        topologies.DYNAMIC["teleport"].bind(active=9).support_of(8)
    with pytest.raises(TopologyError, match="inner must name"):
        topologies.DYNAMIC["teleport"].bind(active=3, inner="teleport").support_of(8)
