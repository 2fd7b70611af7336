"""Epidemic Learning's topologies (topologies.epidemic): EL-Local's W against the weights written here from the
round's drawn targets, its targets uniform; EL-Oracle's round an s-regular simple graph with a doubly stochastic W;
draws by (seed, round), never by rank; consensus reaches the exact mean on EL-Oracle and drifts on EL-Local, both as
numpy predicts; one message per target counted; the schemes and modes that cannot run on them refused in one line."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

import topologies
from p2pfl.network import NetworkSchedule
from topologies import TopologyError

from conftest import run_job, timing_free_records
from helpers_inproc import setup_algorithm


def schedule(kind: str, n: int, fanout: int, seed: int = 3, **options) -> NetworkSchedule:
    return NetworkSchedule(n, seed=seed, dynamic=topologies.DYNAMIC[kind].bind(fanout=fanout), **options)


def sent_to(net, n: int) -> dict[int, list[int]]:
    """Sender -> the peers that hear from it in the round (read off the round's links)."""
    a = net.adjacency.toarray()
    return {j: [i for i in range(n) if a[i, j]] for j in range(n)}


def el_local_weights(targets: dict[int, list[int]], n: int) -> np.ndarray:
    """EL-Local's mixing written from the paper: a receiver averages its own model and each model that reached it,
    1/(1 + messages received) each."""
    heard: dict[int, list[int]] = {i: [] for i in range(n)}
    for j, to in targets.items():
        for i in to:
            heard[i].append(j)
    w = np.zeros((n, n))
    for i, senders in heard.items():
        for j in [i, *senders]:
            w[i, j] += 1.0 / (1 + len(senders))
    return w


@pytest.mark.parametrize(("n", "s"), [(2, 1), (7, 1), (10, 3), (16, 15)])
def test_el_local_w_is_the_uniform_average_of_what_arrived(n: int, s: int) -> None:
    sched = schedule("epidemic", n, s)
    for t in (1, 2, 7):
        net = sched.at(t)
        targets = sent_to(net, n)
        assert all(len(to) == s and j not in to for j, to in targets.items())  # s distinct others each
        w = net.W.toarray()
        np.testing.assert_allclose(w, el_local_weights(targets, n), rtol=0, atol=1e-15)
        np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=0, atol=1e-15)
        assert net.links == n * s


def test_el_local_targets_are_uniform_subsets_of_the_others() -> None:
    """n = 5, s = 2: each sender's pair is one of C(4, 2) = 6, each with frequency 1/6 over 3,000 rounds (a binomial
    count of 500, standard deviation 20.4: within 5 of them)."""
    n, s, rounds = 5, 2, 3000
    link = topologies.DYNAMIC["epidemic"].bind(fanout=s)
    counts = {j: dict.fromkeys(itertools.combinations([i for i in range(n) if i != j], s), 0) for j in range(n)}
    for t in range(1, rounds + 1):
        g = link.round(n, 11, t).links
        for j in range(n):
            counts[j][tuple(sorted(g.successors(j)))] += 1
    for per_sender in counts.values():
        assert all(abs(c - rounds / 6) < 5 * np.sqrt(rounds * (1 / 6) * (5 / 6)) for c in per_sender.values())


@pytest.mark.parametrize("mixing", ["metropolis", "uniform"])
@pytest.mark.parametrize(("n", "s"), [(8, 1), (9, 2), (12, 3), (64, 7)])
def test_el_oracle_is_s_regular_simple_and_doubly_stochastic(n: int, s: int, mixing: str) -> None:
    sched = schedule("epidemic-oracle", n, s, mixing=mixing)
    for t in (1, 2, 5):
        net = sched.at(t)
        a = net.adjacency.toarray()
        assert np.array_equal(a, a.T) and not np.diag(a).any() and set(np.unique(a)) <= {0, 1}  # simple, both ways
        assert (a.sum(axis=1) == s).all()
        w = net.W.toarray()
        np.testing.assert_allclose(w, (np.eye(n) + a) / (s + 1), rtol=0, atol=1e-15)  # 1/(s+1) on a regular graph
        np.testing.assert_allclose(w.sum(axis=0), 1.0, rtol=0, atol=1e-14)
        np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=0, atol=1e-14)


@pytest.mark.parametrize("kind", ["epidemic", "epidemic-oracle"])
def test_draws_differ_by_round_and_seed_and_repeat_for_equal_ones(kind: str) -> None:
    digests = {(seed, t): schedule(kind, 16, 3, seed=seed).at(t).digest() for seed in (0, 1) for t in (1, 2, 3)}
    assert len(set(digests.values())) == len(digests)
    assert all(schedule(kind, 16, 3, seed=seed).at(t).digest() == d for (seed, t), d in digests.items())


@pytest.mark.parametrize(("kind", "n", "fanout", "says"), [
    ("epidemic", 6, 0, "fanout must be an integer in [1, K-1] = [1, 5]"),
    ("epidemic", 6, 6, "fanout must be an integer in [1, K-1] = [1, 5]"),
    ("epidemic-oracle", 6, 2.5, "fanout must be an integer"),
    ("epidemic-oracle", 7, 3, "K·fanout = 21 is odd"),
])
def test_bad_fanout_is_named(kind: str, n: int, fanout: object, says: str) -> None:
    with pytest.raises(TopologyError) as err:
        topologies.DYNAMIC[kind].bind(fanout=fanout).support_of(n)
    assert says in str(err.value) and kind in str(err.value)


def _rounds_of_mixing(tmp_path: Path, kind: str, n: int, s: int, rounds: int
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the peers' vectors after `rounds` rounds of consensus on `kind`, numpy's W_R … W_1 X_0 from the round's links
    with the weights written here, the mean of X_0)."""
    algo = setup_algorithm(tmp_path, algorithm="consensus", peers=n, topology=kind, topology_params=f"fanout={s}",
                           vector_size=5, vector_dtype="float64", seed=4)
    x = np.stack([algo.peers[p].x.numpy() for p in range(n)])
    mean = x.mean(axis=0)
    for t in range(1, rounds + 1):
        net = algo.ctx.schedule.at(t)
        targets = sent_to(net, n)
        w = el_local_weights(targets, n) if kind == "epidemic" else (np.eye(n) + net.adjacency.toarray()) / (s + 1)
        x = w @ x
        algo.communicate(t, net)
    got = np.stack([algo.peers[p].x.numpy() for p in range(n)])
    return got, x, mean


def test_consensus_on_el_oracle_reaches_the_exact_mean(tmp_path: Path) -> None:
    got, want, mean = _rounds_of_mixing(tmp_path, "epidemic-oracle", 16, 3, 60)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got, np.broadcast_to(mean, got.shape), rtol=0, atol=1e-10)


def test_consensus_on_el_local_agrees_but_its_mean_drifts(tmp_path: Path) -> None:
    got, want, mean = _rounds_of_mixing(tmp_path, "epidemic", 16, 3, 60)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    assert np.ptp(got, axis=0).max() < 1e-8  # the peers agree ...
    assert np.abs(got.mean(axis=0) - mean).max() > 1e-3  # ... on a point that is not the start's mean


CONSENSUS = ["-m", "p2pfl.run", "--algorithm", "consensus", "--peers", "6", "--vector-size", "10", "--vector-dtype",
             "float64", "--eval-every", "0", "--no-progress", "--no-plots", "--seed", "9", "--rounds", "3"]


@pytest.mark.parametrize("kind", ["epidemic", "epidemic-oracle"])
def test_records_on_one_and_two_ranks_agree_and_count_a_message_per_target(tmp_path: Path, kind: str) -> None:
    """K = 6, s = 2 on 1 and 2 ranks, records bit for bit (timings aside; consensus reads no data set, so this is
    conftest's one_and_two_ranks_agree less its dataset entries): K·s = 12 messages a round, each 10 float64."""
    for ranks, name in ((2, "two"), (0, "one")):
        proc = run_job([*CONSENSUS, "--topology", kind, "--topology-params", "fanout=2", "--out", str(tmp_path),
                        "--name", name], ranks=ranks)
        assert proc.returncode == 0, proc.stderr[-3000:]
    one = timing_free_records(tmp_path / "one")
    assert one == timing_free_records(tmp_path / "two")
    manifest = json.loads((tmp_path / "one" / "manifest.json").read_text())
    assert manifest["network"]["kind"] == kind and manifest["config"]["topology_params"] == "fanout=2"
    rounds = [r for r in one if r["type"] == "round" and r["round"] > 0]
    assert [r["bytes_sent"] for r in rounds] == [6 * 2 * 80] * 3
    assert [r["network"]["links"] for r in rounds] == [12] * 3
    assert len({r["network"]["digest"] for r in rounds}) == 3


@pytest.mark.parametrize(("kind", "extra", "says"), [
    ("epidemic", ("--gossip", "gradient-tracking"), "--gossip gradient-tracking: needs a doubly stochastic W"),
    ("epidemic", ("--gossip", "exact-diffusion"), "--gossip exact-diffusion: needs a doubly stochastic W"),
    ("epidemic", ("--gossip", "choco"), "one-way"),
    ("epidemic", ("--mode", "async", "--compute-time", "1"), "--mode async: averages pairwise over a static"),
    ("epidemic-oracle", ("--mode", "async", "--compute-time", "1"), "--mode async: averages pairwise over a static"),
])
def test_what_cannot_run_on_them_is_refused_in_one_line(tmp_path: Path, kind: str, extra: tuple[str, ...],
                                                        says: str) -> None:
    algorithm = "consensus" if "--mode" in extra else "quadratic"  # consensus has an asynchronous form
    args = ["-m", "p2pfl.run", "--algorithm", algorithm, "--peers", "8", "--rounds", "2", "--topology", kind,
            "--topology-params", "fanout=2", "--out", str(tmp_path), "--no-progress", "--no-plots", *extra]
    proc = run_job(args, ranks=0)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and says in lines[0], proc.stderr


@pytest.mark.parametrize(("kind", "scheme", "below"), [("epidemic-oracle", "gradient-tracking", 1e-16),
                                                    ("epidemic-oracle", "choco", None),
                                                    ("epidemic", "push-sum", None)])
def test_the_schemes_their_weights_allow_run(tmp_path: Path, kind: str, scheme: str, below: float | None) -> None:
    """EL-Oracle's W is doubly stochastic every round: gradient tracking reaches the quadratic's optimum (error
    below 1e-16 after 300 rounds) and CHOCO runs on its undirected links; push-sum runs on EL-Local's one-way ones.
    Those without an exactness claim here must still shrink the starting error a hundredfold."""
    args = ["-m", "p2pfl.run", "--algorithm", "quadratic", "--peers", "8", "--rounds", "300", "--topology", kind,
            "--topology-params", "fanout=2", "--lr", "0.05", "--out", str(tmp_path), "--name", "r", "--no-progress",
            "--no-plots", "--eval-every", "0", "--gossip", scheme]
    proc = run_job(args, ranks=0)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    error = [r["error"] for r in lines if r["type"] == "round"]
    assert error[-1] < (below if below is not None else error[0] / 100), (error[0], error[-1])


def test_el_local_w_is_not_column_stochastic_and_el_oracles_is() -> None:
    """The property the refusals read: EL-Local's column sums leave 1, EL-Oracle's and the one-peer graph's do not."""
    assert schedule("epidemic", 12, 2).column_drift(1) > 0.1
    assert schedule("epidemic-oracle", 12, 2).column_drift(1) < 1e-12
    assert NetworkSchedule(12, dynamic=topologies.DYNAMIC["one-peer-exponential"]).column_drift(1) < 1e-12
    assert nx.is_connected(schedule("epidemic", 12, 2).support)


def test_random_regular_is_a_fixed_connected_regular_graph_of_the_seed() -> None:
    """D-PSGD's baseline: every peer of degree s, connected, the same graph for a seed and another for the next."""
    graphs = [topologies.build("random-regular", 64, seed=seed, degree=6) for seed in (0, 0, 1)]
    for g in graphs:
        assert set(dict(g.degree).values()) == {6} and nx.is_connected(g) and nx.number_of_selfloops(g) == 0
    assert set(graphs[0].edges) == set(graphs[1].edges) != set(graphs[2].edges)
    with pytest.raises(TopologyError, match="K·degree = 21 is odd"):
        topologies.build("random-regular", 7, degree=3)


def test_a_peer_no_one_drew_still_takes_part() -> None:
    """EL-Local, s = 1 on 16 peers: in round 1 some peers hear from no one (they only send); that is the protocol,
    not a peer left alone, so the run is not refused."""
    sched = schedule("epidemic", 16, 1)
    net = sched.at(1)
    assert any(net.degree(p) == 0 for p in range(16))
    assert sched.lonely(1) == []
