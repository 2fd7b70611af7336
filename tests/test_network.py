"""The network schedule (p2pfl.network): each kind against its definition, weights against a brute force on the
surviving subgraph, the rates of the seeded draws, and bad input."""
from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest

import topologies
from p2pfl.config import ConfigError, make_config, resolve
from p2pfl.network import NetworkSchedule, choose_stragglers, parse_crashes

K = 12


def schedule(kind: str = "cycle", n: int = K, **options) -> NetworkSchedule:
    """A schedule on `kind`: a static topology name, 'resample', or a dynamic topology name."""
    if kind in topologies.DYNAMIC:
        return NetworkSchedule(n, seed=5, dynamic=topologies.DYNAMIC[kind], **options)
    if kind == "resample":
        return NetworkSchedule(n, seed=5, resample_p=0.4, **options)
    return NetworkSchedule(n, seed=5, graph=topologies.build(kind, n, seed=5), **options)


KINDS = [("cycle", {"link_failure": 0.3}), ("cycle", {"churn": 0.3}), ("random", {"participation": 0.5}),
         ("resample", {}), ("random-matching", {}), ("cycle", {"crashes": {2: 3, 7: 1}}),
         ("binary-tree", {"link_failure": 0.2, "churn": 0.2, "crashes": {0: 4}}), ("star", {"mixing": "server"}),
         ("one-peer-exponential", {}), ("complete", {"mixing": "max-degree", "link_failure": 0.5})]


def brute_force_metropolis(net, n: int) -> np.ndarray:
    """SPEC §1 Metropolis on the graph of the round's surviving links, entry by entry (identity elsewhere)."""
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from((int(i), int(j)) for i, j in zip(*np.nonzero(net.adjacency.toarray())))
    w = np.eye(n)
    for i in range(n):
        for j in g.neighbors(i):
            w[i, j] = 1.0 / (1 + max(g.degree(i), g.degree(j)))
        if g.degree(i):
            w[i, i] = 1.0 - sum(w[i, j] for j in g.neighbors(i))
    return w


@pytest.mark.parametrize(("kind", "options"), KINDS)
def test_round_network_is_a_pure_function_of_seed_and_round(kind: str, options: dict) -> None:
    a, b = schedule(kind, **options), schedule(kind, **options)
    for t in (5, 1, 3, 5):  # any order, any number of times
        x, y = a.at(t), b.at(t)
        assert np.array_equal(x.adjacency.toarray(), y.adjacency.toarray())
        assert np.array_equal(x.W.toarray(), y.W.toarray())
        assert x.active == y.active and x.alive == y.alive and x.digest() == y.digest()


@pytest.mark.parametrize(("kind", "options"), [k for k in KINDS if k[0] not in ("star", "one-peer-exponential")
                                               and k[1].get("mixing") is None])
def test_metropolis_recomputed_on_the_surviving_subgraph(kind: str, options: dict) -> None:
    """Symmetric, doubly stochastic, supported on the links that survive, and equal to SPEC §1 on that graph."""
    s = schedule(kind, **options)
    for t in range(1, 9):
        net = s.at(t)
        a = net.adjacency.toarray()
        assert np.array_equal(a, a.T)
        np.testing.assert_allclose(net.W.toarray(), brute_force_metropolis(net, K), atol=1e-15)
        np.testing.assert_allclose(net.W.toarray().sum(axis=0), 1.0, atol=1e-12)
        np.testing.assert_allclose(net.W.toarray().sum(axis=1), 1.0, atol=1e-12)
        off = net.W.toarray() - np.diag(np.diag(net.W.toarray()))
        assert ((off > 0) == a).all()
        outside = [p for p in range(K) if p not in net.active]
        assert not a[outside].any() and not a[:, outside].any()


def test_max_degree_recomputed_on_the_surviving_subgraph() -> None:
    net = schedule("complete", mixing="max-degree", link_failure=0.5).at(2)
    dmax = net.adjacency.toarray().sum(axis=1).max()
    off = net.W.toarray() - np.diag(np.diag(net.W.toarray()))
    np.testing.assert_allclose(off, net.adjacency.toarray() / (1.0 + dmax), atol=1e-15)
    assert dmax < K - 1  # links did fail


def test_uniform_stays_row_stochastic_over_the_closed_neighbourhood() -> None:
    net = schedule("star", mixing="uniform", churn=0.3).at(3)
    for i in net.active:
        deg = net.adjacency.toarray()[i].sum()
        assert net.W.toarray()[i, i] == pytest.approx(1 / (deg + 1))
        np.testing.assert_allclose(net.W.toarray()[i, net.adjacency.toarray()[i]], 1 / (deg + 1))


def test_link_failures_happen_at_rate_q_independently_per_round() -> None:
    q, rounds = 0.2, 400
    s = schedule("cycle", n=20, link_failure=q)
    kept = np.array([s.at(t).adjacency.toarray().sum() / 2 for t in range(1, rounds + 1)])  # cycle: 20 edges a round
    rate = 1 - kept.sum() / (20 * rounds)
    assert abs(rate - q) < 4 * math.sqrt(q * (1 - q) / (20 * rounds))
    assert len({s.at(t).digest() for t in range(1, 30)}) > 20  # a new draw each round


def test_churn_takes_peers_out_at_its_rate_and_combines_with_participation() -> None:
    s = schedule("cycle", n=20, churn=0.25)
    out = sum(20 - len(s.at(t).active) for t in range(1, 401)) / (20 * 400)
    assert abs(out - 0.25) < 4 * math.sqrt(0.25 * 0.75 / 8000)
    both = schedule("cycle", n=20, churn=0.25, participation=0.5)
    for t in range(1, 20):
        assert both.at(t).active <= schedule("cycle", n=20, participation=0.5).at(t).active
        assert both.at(t).active <= s.at(t).active


def test_crashed_peers_stop_for_good_and_the_rest_go_on() -> None:
    s = schedule("cycle", crashes={2: 3, 7: 1})
    assert s.at(1).alive == frozenset(range(K)) - {7}
    for t in (3, 4, 9):
        net = s.at(t)
        assert net.crashed == {2, 7} and not ({2, 7} & net.active)
        assert net.incoming[1] == (0,) and net.incoming[3] == (4,)  # 2's neighbours continue with the other side
    assert s.at(2).incoming[1] == (0, 2)


def test_crash_spec_names_peers_or_draws_a_fraction() -> None:
    assert parse_crashes("3@5, 7@2,3@4", 10, seed=0) == {3: 4, 7: 2}
    drawn = parse_crashes("15%@3", 20, seed=1)
    assert len(drawn) == 3 and set(drawn.values()) == {3}
    assert parse_crashes("0.15@3", 20, seed=1) == drawn  # the same fraction written the other way
    assert parse_crashes("15%@3", 20, seed=2) != drawn
    with pytest.raises(ValueError, match="peer 12 does not exist"):
        parse_crashes("12@1", 10, seed=0)


def test_one_peer_exponential_reaches_the_exact_average_in_log2_k_rounds() -> None:
    for n in (2, 4, 8, 16, 32):
        s = schedule("one-peer-exponential", n=n)
        product = np.eye(n)
        tau = int(math.log2(n))
        for t in range(1, tau + 1):
            net = s.at(t)
            assert (net.adjacency.toarray().sum(axis=1) == 1).all() and (net.adjacency.toarray().sum(axis=0) == 1).all()
            i = 0
            assert net.incoming[i] == ((i + 2 ** (t - 1)) % n,)
            np.testing.assert_allclose(net.W.toarray()[net.adjacency.toarray()], 0.5)
            product = net.W.toarray() @ product
            if t < tau:
                assert np.abs(product - 1 / n).max() > 1e-3
        np.testing.assert_allclose(product, np.full((n, n), 1 / n), atol=1e-15)
        assert s.at(tau + 1).digest() == s.at(1).digest()  # the hops cycle with period tau


def test_random_matching_is_a_maximal_matching_with_pairwise_averaging() -> None:
    for n in (10, 11):
        s = schedule("random-matching", n=n)
        seen = set()
        for t in range(1, 30):
            net = s.at(t)
            deg = net.adjacency.toarray().sum(axis=1)
            assert (deg <= 1).all() and (deg == 0).sum() == n % 2
            np.testing.assert_allclose(net.W.toarray()[net.adjacency.toarray()], 0.5)
            seen.add(net.digest())
        assert len(seen) == 29


def test_resampled_graph_is_connected_and_new_each_round() -> None:
    s = schedule("resample", n=15)
    density = []
    for t in range(1, 40):
        g = nx.from_numpy_array(s.at(t).adjacency.toarray().astype(int))
        assert nx.is_connected(g)
        density.append(g.number_of_edges() / (15 * 14 / 2))
    assert len({s.at(t).digest() for t in range(1, 40)}) == 39
    assert abs(np.mean(density) - 0.4) < 0.05  # G(K, p) with p = 0.4 (conditioned on being connected)


def test_server_averages_everyone_it_reaches_and_is_never_churned_out() -> None:
    s = schedule("star", n=8, mixing="server", churn=0.4, link_failure=0.2)
    for t in range(1, 20):
        net = s.at(t)
        assert 0 in net.active
        members = [0] + [i for i in sorted(net.active) if i and net.adjacency.toarray()[i, 0]]
        np.testing.assert_allclose(net.W.toarray()[np.ix_(members, members)], 1 / len(members))
        others = [i for i in range(8) if i not in members]
        np.testing.assert_allclose(net.W.toarray()[np.ix_(others, others)], np.eye(len(others)))


def test_rejoining_peers_are_those_back_after_sitting_out() -> None:
    s = schedule("random", participation=0.5)
    assert s.at(1).rejoining == frozenset() and s.at(1).fresh == s.at(1).active
    for t in range(2, 10):
        net, before = s.at(t), s.at(t - 1)
        assert net.rejoining == net.active - before.active
        assert net.fresh == net.active & before.active


def test_stragglers_are_a_fixed_seeded_subset() -> None:
    chosen = choose_stragglers(3, 20, 0.25, 0.5)
    assert len(chosen) == 5 and set(chosen.values()) == {0.5}
    assert choose_stragglers(3, 20, 0.25, 0.5) == chosen and choose_stragglers(4, 20, 0.25, 0.5) != chosen
    s = schedule("cycle", n=20, stragglers=chosen, churn=0.3)
    for t in range(1, 5):
        net = s.at(t)
        assert set(net.work) == set(chosen) & net.active
        assert all(net.work_fraction(p) == (0.5 if p in chosen else 1.0) for p in net.active)


def test_sigma2_is_lambda2_for_a_static_symmetric_graph_and_one_when_a_peer_sits_out() -> None:
    g = topologies.build("cycle", K)
    lam = topologies.statistics(g, topologies.mixing_matrix(g))["lambda2"]
    assert schedule("cycle").at(1).sigma2() == pytest.approx(lam, abs=1e-12)
    assert schedule("cycle").at(1, active=range(K - 1)).sigma2() == pytest.approx(1.0)


def test_lonely_peers_are_found_before_the_run() -> None:
    assert schedule("cycle", n=4, crashes={1: 1, 3: 1}).lonely(5) == [0, 2]
    assert schedule("cycle", n=4, crashes={1: 2, 3: 2}).lonely(5) == []  # they had neighbours in round 1
    assert schedule("star", n=5, crashes={0: 1}).lonely(3) == [1, 2, 3, 4]
    assert schedule("random-matching", n=6, crashes={0: 1}).lonely(10) == []


@pytest.mark.parametrize(("options", "message"), [
    ({"link_failure": 1.0}, "--link-failure: must lie in [0, 1)"),
    ({"link_failure": -0.1}, "--link-failure: must lie in [0, 1)"),
    ({"churn": 1.0}, "--churn: must lie in [0, 1)"),
    ({"crash": "3@0"}, "--crash: the round of a crash is 1 or later"),
    ({"crash": "three@2"}, "--crash: expected entries PEER@ROUND"),
    ({"crash": "1.5@2"}, "--crash: a fraction of peers lies in (0, 1)"),
    ({"mixing": "server", "topology": "cycle"}, "--mixing: server is the star's hub"),
    ({"resample": True, "topology": "cycle"}, "--resample: redraws the random graph"),
    ({"straggler_work": 0.0}, "--straggler-work: must lie in (0, 1]"),
    ({"rejoin": "later"}, "--rejoin: unknown value 'later'"),
])
def test_bad_network_options_name_the_option(options: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        make_config(algorithm="consensus", **options)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_crash_of_a_missing_peer_or_of_everyone_fails_at_resolve() -> None:
    with pytest.raises(ValueError, match=r"--crash: peer 9 does not exist \(peers are 0..7\)"):
        resolve(make_config(algorithm="consensus", peers=8, crash="9@2"), 1)
    with pytest.raises(ValueError, match="crashes all 8 peers"):
        resolve(make_config(algorithm="consensus", peers=8, rounds=5, crash="0@2,90%@3"), 1)
