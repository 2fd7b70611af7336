"""The static and periodic topology families of issue 44: the exponential graph and the hypercube against their
definitions, the k-peer exponential graph (k = 1 the one-peer graph round for round), and the Base-(k+1) graphs'
exact averaging after their stated number of rounds (and not one round before), each checked against a brute-force
product of the schedule's own mixing matrices in numpy; every W doubly stochastic, degrees at most k; the records of
a short consensus run the same on 1 and 2 processes."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import topologies
from p2pfl.network import NetworkSchedule
from p2pfl.run import main

from conftest import four_ranks_equal_one, run_job, timing_free_records

CONSENSUS = ["--algorithm", "consensus", "--vector-size", "50", "--eval-every", "0", "--no-progress", "--no-plots",
             "--seed", "3", "--vector-dtype", "float64"]


def schedule(name: str, n: int, **params: int) -> NetworkSchedule:
    return NetworkSchedule(n, seed=1, dynamic=topologies.DYNAMIC[name].bind(**params))


def relative_distance(x: np.ndarray) -> float:
    """sqrt(mean_i ‖x_i − x̄‖²) / ‖x̄‖: the consensus distance, relative, not squared. x̄ from correctly rounded
    sums (math.fsum): numpy's running sum over 1,000 rows is itself off by about 1e-14 relative."""
    mean = np.array([math.fsum(column) for column in x.T]) / len(x)
    return float(np.sqrt(((x - mean) ** 2).sum(axis=1).mean()) / np.linalg.norm(mean))


def distances(s: NetworkSchedule, rounds: int, seed: int = 0) -> list[float]:
    """The relative consensus distance after rounds 1..rounds of gossip X ← W_t X in float64, W_t the schedule's
    (dense: a brute-force product), from X of i.i.d. N(1, 1) rows."""
    x = np.random.default_rng(seed).normal(1.0, 1.0, size=(s.n, 8))
    out = []
    for t in range(1, rounds + 1):
        x = s.at(t).W.toarray() @ x
        out.append(relative_distance(x))
    return out


def assert_doubly_stochastic(w: np.ndarray) -> None:
    assert (w >= 0).all()
    np.testing.assert_allclose(w.sum(axis=0), 1.0, rtol=0, atol=1e-14)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=0, atol=1e-14)


# ------------------------------------------------------------------ static: exponential and hypercube
@pytest.mark.parametrize("n", [2, 3, 8, 16, 24, 100])
def test_exponential_graph_links_i_to_i_plus_and_minus_powers_of_two(n: int) -> None:
    g = topologies.build("exponential", n)
    powers = [2 ** j for j in range(int(math.floor(math.log2(n - 1))) + 1)]
    expected = {frozenset((i, (i + s * h) % n)) for i in range(n) for h in powers for s in (1, -1)}
    assert {frozenset(e) for e in g.edges} == {e for e in expected if len(e) == 2}
    w = topologies.mixing_matrix(g)  # the default (Metropolis) is 1/(degree + 1): the graph is regular
    degree = {d for _, d in g.degree}
    assert len(degree) == 1
    a = topologies.mixing.adjacency(g).toarray()
    np.testing.assert_allclose(w, (a + np.eye(n)) / (degree.pop() + 1), rtol=0, atol=1e-15)
    np.testing.assert_allclose(w, topologies.mixing_matrix(g, "uniform"), rtol=0, atol=1e-15)
    assert_doubly_stochastic(w)


def test_exponential_graph_degrees_where_hops_meet() -> None:
    assert {d for _, d in topologies.build("exponential", 16).degree} == {7}  # ±1, ±2, ±4, 8
    assert {d for _, d in topologies.build("exponential", 24).degree} == {8}  # 8 + 16 = 24: ±8 and ±16 meet
    assert {d for _, d in topologies.build("exponential", 100).degree} == {14}


@pytest.mark.parametrize("n", [2, 4, 16, 64])
def test_hypercube_links_peers_one_bit_apart(n: int) -> None:
    g = topologies.build("hypercube", n)
    assert {frozenset(e) for e in g.edges} == {frozenset((i, j)) for i in range(n) for j in range(n)
                                               if bin(i ^ j).count("1") == 1}
    w = topologies.mixing_matrix(g)
    d = int(math.log2(n))
    np.testing.assert_allclose(np.diag(w), 1 / (d + 1), rtol=0, atol=1e-15)
    assert_doubly_stochastic(w)


def test_hypercube_refuses_peers_not_a_power_of_two(tmp_path: Path, capsys) -> None:
    with pytest.raises(topologies.TopologyError, match="needs a power of 2 peers .* got 24"):
        topologies.build("hypercube", 24)
    with pytest.raises(SystemExit) as exit_:
        main([*CONSENSUS, "--peers", "12", "--rounds", "1", "--topology", "hypercube", "--out", str(tmp_path)])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "p2pfl: error: topology 'hypercube' needs a power of 2 peers (2, 4, 8, 16, ...), got 12"]


# ------------------------------------------------------------------ the k-peer exponential graph
@pytest.mark.parametrize("n", [8, 24])
def test_k_peer_exponential_with_k_1_is_the_one_peer_graph_bit_for_bit(n: int) -> None:
    one, k1 = schedule("one-peer-exponential", n), schedule("k-peer-exponential", n, fanout=1)
    for t in range(1, 12):
        a, b = one.at(t), k1.at(t)
        assert a.digest() == b.digest() and (a.adjacency != b.adjacency).nnz == 0
        assert np.array_equal(a.W.toarray(), b.W.toarray())
    assert one.describe()["period"] == k1.describe()["period"] == len(topologies.dynamic.hops(n))


@pytest.mark.parametrize("n, k", [(24, 2), (24, 5), (16, 3), (100, 4)])
def test_k_peer_exponential_hears_from_k_hops_cycling_through_all(n: int, k: int) -> None:
    tau = math.ceil(math.log2(n))
    s = schedule("k-peer-exponential", n, fanout=k)
    used = []
    for t in range(1, tau + 1):
        net = s.at(t)
        hops = [2 ** (((t - 1) * k + r) % tau) for r in range(k)]
        assert all(net.incoming[i] == tuple(sorted((i + h) % n for h in hops)) for i in range(n))
        w = net.W.toarray()
        np.testing.assert_allclose(w[net.adjacency.toarray()], 1 / (k + 1), rtol=0, atol=1e-15)
        assert_doubly_stochastic(w)  # a circulant: column sums are row sums
        used += hops
    assert set(used) == {2 ** j for j in range(tau)}  # every out-neighbour of the exponential graph in time
    period = s.describe()["period"]
    assert period == tau // math.gcd(tau, k) and s.at(period + 1).digest() == s.at(1).digest()


def test_k_peer_exponential_refuses_a_fanout_above_log2_k() -> None:
    with pytest.raises(topologies.TopologyError, match=r"fanout must be an integer in \[1, ⌈log2 K⌉\] = \[1, 5\] "
                                                       r"on 24 peers, got 6"):
        schedule("k-peer-exponential", 24, fanout=6)


def test_one_peer_exponential_averages_exactly_at_powers_of_two_only() -> None:
    for m in (3, 5, 7):
        n = 2 ** m
        s = schedule("one-peer-exponential", n)
        d = distances(s, m)
        assert d[-1] <= 1e-14 and d[-2] > 1e-3
        assert s.describe()["exact_consensus_round"] == m
    s = schedule("one-peer-exponential", 24)
    d = distances(s, 4 * 5)
    assert min(d) > 1e-6  # after 4 periods of 5 rounds: still far from exact (it only converges geometrically)
    assert s.describe()["exact_consensus_round"] is None and s.describe()["period"] == 5


# ------------------------------------------------------------------ Base-(k+1) graphs
@pytest.mark.parametrize("n", [24, 100, 1000])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_base_graph_reaches_the_exact_mean_at_its_stated_round_not_before(n: int, k: int) -> None:
    s = schedule("base", n, max_degree=k)
    manifest = s.describe()
    rounds = manifest["exact_consensus_round"]
    assert rounds == manifest["period"] and manifest["weights"] == "the topology's own"
    assert rounds <= 2 * math.log(n, k + 1) + 2  # O(log_{k+1} n): the paper's bound
    x = np.random.default_rng(0).normal(1.0, 1.0, size=(n, 8))
    product = np.eye(n)
    for t in range(1, rounds + 1):
        net = s.at(t)
        w = net.W.toarray()
        assert_doubly_stochastic(w)
        np.testing.assert_array_equal(w, w.T)
        assert net.adjacency.toarray().sum(axis=1).max() <= k  # maximum degree k
        product = w @ product
        distance = relative_distance(product @ x)
        if t == rounds - 1:
            assert distance > 1e-3  # not one round before
    assert distance <= 1e-14
    assert np.abs(product * n - 1).max() <= 1e-14  # W_T ⋯ W_1 = J to rounding
    assert s.at(rounds + 1).digest() == s.at(1).digest()  # then it repeats


@pytest.mark.parametrize("n", [24, 100])
@pytest.mark.parametrize("k", [1, 2])
def test_simple_base_graph_is_exact_too(n: int, k: int) -> None:
    s = schedule("simple-base", n, max_degree=k)
    rounds = s.describe()["exact_consensus_round"]
    d = distances(s, rounds)
    assert d[-1] <= 1e-14 and d[-2] > 1e-3
    assert all(s.at(t).adjacency.toarray().sum(axis=1).max() <= k for t in range(1, rounds + 1))
    assert rounds >= schedule("base", n, max_degree=k).describe()["exact_consensus_round"]


def test_base_graph_failed_links_leave_their_weight_on_the_diagonal() -> None:
    """Links failing: W stays symmetric and doubly stochastic, the topology's weights on the links that survive."""
    full = schedule("base", 24, max_degree=2)
    lossy = NetworkSchedule(24, seed=1, dynamic=topologies.DYNAMIC["base"].bind(max_degree=2), link_failure=0.3)
    lost = 0
    for t in range(1, 5):
        w, whole = lossy.at(t).W.toarray(), full.at(t).W.toarray()
        kept = lossy.at(t).adjacency.toarray()
        lost += int(full.at(t).adjacency.toarray().sum() - kept.sum())
        np.testing.assert_array_equal(w[kept], whole[kept])
        np.testing.assert_array_equal(w, w.T)
        assert_doubly_stochastic(w)
    assert lost > 0


@pytest.mark.parametrize("value", [0, -1, 1.5, "two"])
def test_base_graph_refuses_a_max_degree_not_a_positive_integer(value: object) -> None:
    with pytest.raises(topologies.TopologyError, match="topology 'base': max_degree must be an integer >= 1"):
        schedule("base", 24, max_degree=value).at(1)


def test_a_base_run_records_its_period_and_reaches_the_mean(tmp_path: Path) -> None:
    assert main([*CONSENSUS, "--peers", "24", "--rounds", "5", "--topology", "base", "--topology-params",
                 "max_degree=2", "--out", str(tmp_path), "--name", "b"]) == 0
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["network"]["period"] == manifest["network"]["exact_consensus_round"] == 4
    lines = [json.loads(line) for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    distance = [r["consensus_distance"] for r in lines if r["type"] == "round"]
    assert distance[3] > 1e-6 and distance[4] < 1e-28  # squared: exact after round 4, not after round 3


# ------------------------------------------------------------------ placement independence
@pytest.mark.mpi
@pytest.mark.parametrize("topology", [["base", "--topology-params", "max_degree=2"],
                                      ["k-peer-exponential", "--topology-params", "fanout=2"],
                                      ["exponential"], ["hypercube"]], ids=lambda t: t[0])
def test_records_on_one_and_two_ranks_bit_for_bit(tmp_path: Path, topology: list[str]) -> None:
    runs = tmp_path / "runs"
    args = ["-m", "p2pfl.run", *CONSENSUS, "--peers", "8", "--rounds", "4", "--topology", *topology,
            "--link-failure", "0.2", "--out", str(runs)]
    for ranks, name in ((2, "two"), (0, "one")):
        proc = run_job([*args, "--name", name], ranks=ranks)
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert timing_free_records(runs / "two") == timing_free_records(runs / "one")
    one, two = (json.loads((runs / name / "manifest.json").read_text()) for name in ("one", "two"))
    assert one["network"] == two["network"] and two["world_size"] == 2


@pytest.mark.mpi
def test_base_records_on_four_ranks_equal_one(tmp_path: Path) -> None:
    four_ranks_equal_one(["-m", "p2pfl.run", *CONSENSUS, "--peers", "12", "--rounds", "4", "--topology", "base",
                          "--topology-params", "max_degree=2"], tmp_path / "runs")


#: (topology, its flags, --gossip, the quadratic's error after 300 rounds must fall below it): the schemes each new
#: topology's properties allow (undirected and symmetric: base, simple-base, exponential, hypercube; one-way but
#: doubly stochastic circulants: k-peer-exponential, where gradient tracking's fixed point stays exact).
RUNS_ON = [("base", ("--max-degree", "1"), "gradient-tracking", 1e-16),
           ("simple-base", ("--max-degree", "2"), "choco", None), ("base", ("--max-degree", "2"), "choco", None),
           ("k-peer-exponential", ("--fanout", "2"), "gradient-tracking", 1e-16),
           ("exponential", (), "gradient-tracking", 1e-16), ("hypercube", (), "choco", None)]


@pytest.mark.parametrize(("topology", "flags", "scheme", "below"), RUNS_ON)
def test_the_schemes_their_properties_allow_run(tmp_path: Path, topology: str, flags: tuple[str, ...], scheme: str,
                                                below: float | None) -> None:
    """Gradient tracking reaches the quadratic's optimum where W is doubly stochastic every round; CHOCO (no
    exactness claim here) must shrink the starting error a hundredfold on undirected links."""
    args = ["-m", "p2pfl.run", "--algorithm", "quadratic", "--peers", "8", "--rounds", "300", "--topology", topology,
            *flags, "--lr", "0.05", "--out", str(tmp_path), "--name", "r", "--no-progress", "--no-plots",
            "--eval-every", "0", "--gossip", scheme]
    proc = run_job(args, ranks=0)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    error = [r["error"] for r in lines if r["type"] == "round"]
    assert error[-1] < (below if below is not None else error[0] / 100), (error[0], error[-1])


@pytest.mark.parametrize("topology", ["exponential", "hypercube"])
def test_asynchronous_gossip_runs_on_the_static_ones(tmp_path: Path, topology: str) -> None:
    """AD-PSGD's pairwise averaging on a static undirected graph: consensus keeps the mean and the peers draw
    together (the final distance to the mean below a tenth of the starting one)."""
    args = ["-m", "p2pfl.run", "--algorithm", "consensus", "--peers", "8", "--vector-size", "6", "--vector-dtype",
            "float64", "--updates", "400", "--mode", "async", "--compute-time", "1", "--topology", topology, "--out",
            str(tmp_path), "--name", "r", "--no-progress", "--no-plots"]
    proc = run_job(args, ranks=0)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    distance = [r["consensus_distance"] for r in lines if r.get("consensus_distance") is not None]
    assert distance[-1] < distance[0] / 10, (distance[0], distance[-1])


@pytest.mark.parametrize(("topology", "flags", "extra", "says"), [
    ("k-peer-exponential", ("--fanout", "2"), ("--gossip", "choco"), "--gossip choco: keeps its public copies on "
                                                                     "undirected links"),
    ("k-peer-exponential", ("--fanout", "2"), ("--mode", "async", "--compute-time", "1"), "is one-way"),
    ("base", ("--max-degree", "1"), ("--mode", "async", "--compute-time", "1"), "is a changing network"),
    ("simple-base", ("--max-degree", "2"), ("--mode", "async", "--compute-time", "1"), "is a changing network"),
])
def test_what_their_properties_forbid_is_refused_in_one_line(tmp_path: Path, topology: str, flags: tuple[str, ...],
                                                             extra: tuple[str, ...], says: str) -> None:
    algorithm = "consensus" if "--mode" in extra else "quadratic"
    args = ["-m", "p2pfl.run", "--algorithm", algorithm, "--peers", "8", "--rounds", "2", "--topology", topology,
            *flags, "--out", str(tmp_path), "--no-progress", "--no-plots", *extra]
    proc = run_job(args, ranks=0)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and says in lines[0], proc.stderr
