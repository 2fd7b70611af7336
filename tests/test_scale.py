"""Thousands of peers (issue 29): the sparse round network against a dense brute force, the stacked gossip sum
against the one-receiver sum, G(n, p) drawn by blocks against one draw, the vectorised exchange plan against a
walk over the links, and a 5,000-peer consensus run whose trace is the same on 1 and 2 ranks."""
from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import torch

import topologies
from p2pfl.comm.placement import Placement
from p2pfl.gossip import rules
from p2pfl.gossip.rules import stacked_sums, weighted_sum
from p2pfl.network.schedule import NetworkSchedule
from topologies import generators

from conftest import run_job, timing_free_records


def _dense_metropolis(a: np.ndarray) -> np.ndarray:
    """Metropolis weights of a 0/1 adjacency matrix, written out densely."""
    deg = a.sum(axis=1)
    k = len(a)
    w = np.zeros((k, k))
    for i in range(k):
        for j in range(k):
            if a[i, j]:
                w[i, j] = 1.0 / (1.0 + max(deg[i], deg[j]))
        w[i, i] = 1.0 - w[i].sum()
    return w


@pytest.mark.parametrize("options", [{}, {"link_failure": 0.3}, {"participation": 0.6},
                                     {"churn": 0.2, "link_failure": 0.1}])
def test_sparse_round_network_equals_the_dense_construction(options: dict) -> None:
    """Every round's A is the support restricted to the active peers minus the failed links (both ways), and W
    is Metropolis on what survives, whatever the options."""
    graph = topologies.build("random", 60, seed=2, p=0.1)
    schedule = NetworkSchedule(60, seed=5, graph=graph, **options)
    support = nx.to_numpy_array(graph, nodelist=range(60)) > 0
    for t in range(1, 8):
        net = schedule.at(t)
        a = net.adjacency.toarray()
        active = np.zeros(60, dtype=bool)
        active[sorted(net.active)] = True
        assert not (a & ~support).any() and np.array_equal(a, a.T)
        assert not a[~active].any() and not a[:, ~active].any()
        if not options.get("link_failure"):
            assert np.array_equal(a, support & active[:, None] & active[None, :])
        np.testing.assert_allclose(net.W.toarray(), _dense_metropolis(a), rtol=0, atol=1e-15)
        assert net.incoming == {i: tuple(np.flatnonzero(a[i]).tolist()) for i in sorted(net.active)}
        for i in range(60):
            row = net.row(i)
            assert [j for j, _ in row] == sorted(set(np.flatnonzero(a[i]).tolist()) | {i})
            assert sum(w for _, w in row) == pytest.approx(1.0, abs=1e-15)


def test_link_failures_are_one_draw_per_support_edge_at_rate_q() -> None:
    """Each support edge fails both ways with probability q, independently: over many rounds the surviving
    fraction is 1 − q within sampling error, and an edge's fate does not depend on who else takes part."""
    graph = topologies.build("random", 200, seed=1, p=0.05)
    everyone = NetworkSchedule(200, seed=3, graph=graph, link_failure=0.25)
    fewer = NetworkSchedule(200, seed=3, graph=graph, link_failure=0.25, participation=0.5)
    edges = graph.number_of_edges()
    kept = [everyone.at(t).links / 2 / edges for t in range(1, 41)]
    assert abs(np.mean(kept) - 0.75) < 4 * np.sqrt(0.25 * 0.75 / (edges * 40))
    for t in range(1, 6):
        a, b = everyone.at(t).adjacency.toarray(), fewer.at(t)
        both = np.array(sorted(b.active))
        assert np.array_equal(a[np.ix_(both, both)], b.adjacency.toarray()[np.ix_(both, both)])


@pytest.mark.parametrize("n, p, block", [(2, 0.9, 1), (9, 0.5, 3), (120, 0.1, 50), (400, 0.02, 1 << 22)])
def test_gnp_drawn_by_blocks_is_the_one_draw_over_the_upper_triangle(n: int, p: float, block: int,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The block-by-block draw keeps the pairs, their order and the generator's state of one draw of a uniform
    per pair i < j in row-major order."""
    monkeypatch.setattr(generators, "GNP_BLOCK", block)
    want_rng, got_rng = np.random.default_rng(7), np.random.default_rng(7)
    rows, cols = np.triu_indices(n, k=1)
    keep = want_rng.random(rows.size) < p
    got = generators._gnp_edges(got_rng, n, p)
    assert np.array_equal(got, np.stack([rows[keep], cols[keep]], axis=1))
    assert want_rng.random() == got_rng.random()


def _random_rows(gen: np.random.Generator, k: int, dtype: torch.dtype, numel: int = 33
                 ) -> tuple[dict, dict, dict]:
    own = {p: torch.from_numpy(gen.standard_normal(numel)).to(dtype) for p in range(k)}
    rows, inbox = {}, {}
    for p in range(0, k, 3):
        heard = sorted(gen.choice([q for q in range(k) if q != p], size=gen.integers(0, 7), replace=False))
        members = sorted([*heard, p])
        w = gen.random(len(members))
        rows[p] = [(int(j), float(x)) for j, x in zip(members, w / w.sum())]
        inbox[p] = {int(q): own[int(q)] for q in heard}
    return own, rows, inbox


@pytest.mark.parametrize("block_bytes", [1, 500, 256 << 10])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_stacked_sums_are_each_receivers_sum_bitwise_whoever_shares_the_stack(
        dtype: torch.dtype, block_bytes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random rows over random neighbourhoods (own vector included, some receivers alone): each receiver's
    stacked sum is bit for bit its one-receiver weighted_sum, also when it is stacked with only some of the
    others, as on another layout of the peers over ranks, and whatever block of receivers it is summed in (one
    receiver a block, a few, all)."""
    monkeypatch.setattr(rules, "SLOT_BLOCK_BYTES", block_bytes)
    gen = np.random.default_rng(0)
    for _ in range(20):
        own, rows, inbox = _random_rows(gen, 40, dtype)
        got = stacked_sums(own, inbox, rows)
        for p in rows:
            assert torch.equal(got[p], weighted_sum(own[p], inbox[p], rows[p]))
        some = [p for p in rows if gen.random() < 0.5]
        part = stacked_sums(own, {p: inbox[p] for p in some}, {p: rows[p] for p in some})
        assert all(torch.equal(part[p], got[p]) for p in some)


def test_exchange_plan_equals_a_walk_over_the_links() -> None:
    """The vectorised plan (p2pfl.comm.transport.Transport._plan) against the definition, on 3 ranks of 30
    peers: rank r sends peer q to rank s when q is on r and some receiver on s hears q; it receives the reverse."""
    from p2pfl.comm.transport import Transport

    class _World:
        rank, size, is_root = 1, 3, False

        def neighbour_comm(self, ranks):  # noqa: ANN001, ANN201 - a stand-in: planning needs no communicator
            return None

    placement = Placement(30, 3)
    graph = topologies.build("random", 30, seed=4, p=0.3)
    transport = Transport(_World(), graph, placement, timeout=1.0)
    transport.comm = object()  # plan as if ranks were linked
    transport.remote_ranks = [0, 2]
    links = {i: tuple(sorted(graph.neighbors(i))) for i in range(30) if i % 4}
    sends, recvs, local = transport._plan(links)
    for r in (0, 2):
        assert sends[r] == sorted({q for i, qs in links.items() for q in qs
                                   if placement.rank_of(q) == 1 and placement.rank_of(i) == r})
        assert recvs[r] == sorted({q for i, qs in links.items() for q in qs
                                   if placement.rank_of(q) == r and placement.rank_of(i) == 1})
    assert local == {q for qs in links.values() for q in qs if placement.rank_of(q) == 1}


@pytest.mark.mpi
def test_5000_peer_consensus_has_the_same_trace_on_1_and_2_ranks(runs_dir) -> None:
    """5,000 peers on G(5000, 0.002) with link failures and partial participation, 3 rounds: every record (the
    consensus distance, each peer's distances, degrees and bytes) is the same bit for bit on 1 and 2 ranks."""
    args = ["-m", "p2pfl.run", "--algorithm", "consensus", "--peers", "5000", "--vector-size", "20", "--rounds", "3",
            "--topology", "random", "--p", "0.002", "--link-failure", "0.1", "--participation", "0.9",
            "--eval-every", "0", "--no-plots", "--no-progress", "--peer-records", "0", "--seed", "3",
            "--out", str(runs_dir)]
    for ranks, name in ((0, "one"), (2, "two")):
        proc = run_job([*args, "--name", name], ranks=ranks, timeout=400)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "timeout" not in proc.stderr
    one, two = timing_free_records(runs_dir / "one"), timing_free_records(runs_dir / "two")
    assert len(one) == 5 and one == two
    assert [len(r["active"]) for r in one[1:4]] == [4500] * 3  # per-peer records kept: every active peer
    assert len(one[-1]["per_peer"]) == 5000


@pytest.mark.parametrize("block_bytes", [1, 3000, 64 << 20])
def test_exact_mean_and_spread_by_blocks_equal_a_brute_force(block_bytes: int,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The network mean and the consensus distance, whatever the block the vectors are stacked in (one vector a
    block, a few, all): the mean equal to math.fsum's correctly rounded one to within the fixed point's
    resolution, the distance equal to the peer-ordered sum of each vector's own squared distance; vectors that
    need grad and vectors of equal size but other shapes stack too."""
    from p2pfl.gossip import average

    from helpers_inproc import world

    monkeypatch.setattr(average, "BLOCK_BYTES", block_bytes)
    gen = torch.Generator().manual_seed(3)
    vectors = {p: torch.randn(24, generator=gen, dtype=torch.float32) * (p + 1) for p in range(37)}
    vectors[5] = vectors[5].reshape(4, 6)
    vectors[7] = vectors[7].clone().requires_grad_(True)
    mean, total = average.spread(world(), vectors, len(vectors))
    rows = [v.detach().reshape(-1).double().tolist() for _, v in sorted(vectors.items())]
    want = [math.fsum(col) / len(rows) for col in zip(*rows)]
    scale = max(abs(x) for row in rows for x in row) * len(rows)
    assert np.allclose(mean.reshape(-1).numpy(), want, rtol=0, atol=scale * 2.0 ** -59)
    flat = mean.reshape(-1)
    distances = [float((v.detach().reshape(-1).double() - flat).pow(2).sum()) for _, v in sorted(vectors.items())]
    expect = 0.0
    for d in distances:
        expect += d
    assert total == expect


@pytest.mark.parametrize("options", [{}, {"link_failure": 0.3, "participation": 0.7}, {"mixing": "max-degree"}])
def test_row_weights_are_each_rows_weights_bitwise(options: dict) -> None:
    """RoundNetwork.row_weights (one array for every row of W) holds, entry for entry, the weights of `row`."""
    graph = topologies.build("random", 80, seed=4, p=0.08)
    schedule = NetworkSchedule(80, seed=6, graph=graph, **options)
    for t in range(1, 5):
        net = schedule.at(t)
        bounds = net.W.indptr
        for i in range(80):
            row = net.row(i)
            assert net.W.indices[bounds[i]:bounds[i + 1]].tolist() == [j for j, _ in row]
            assert net.row_weights[bounds[i]:bounds[i + 1]].tolist() == [w for _, w in row]


def test_link_arrays_answer_membership_and_fanout_as_the_mapping() -> None:
    """LinkArrays.heard and .fanout against the links mapping itself."""
    from p2pfl.comm.inbox import LinkArrays

    gen = np.random.default_rng(1)
    links = {p: tuple(sorted(gen.choice(50, size=gen.integers(0, 6), replace=False).tolist())) for p in range(0, 50, 2)}
    arrays = LinkArrays.of(links)
    receivers, senders = gen.integers(0, 50, 4000), gen.integers(0, 50, 4000)
    want = [q in links.get(p, ()) for p, q in zip(receivers.tolist(), senders.tolist())]
    assert arrays.heard(receivers, senders).tolist() == want
    counts: dict[int, int] = {}
    for senders_of in links.values():
        for q in senders_of:
            counts[q] = counts.get(q, 0) + 1
    assert arrays.fanout == counts


@pytest.mark.parametrize("block_bytes", [1, 256 << 10])
@pytest.mark.parametrize("options", [{}, {"link_failure": 0.3, "participation": 0.7}])
def test_sender_sums_are_each_receivers_weighted_sum_bitwise(options: dict, block_bytes: int,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The array-gathered sums over an inbox of one tensor a sender (rules.sender_sums) against each receiver's
    weighted_sum over its own {sender: payload} and its row of W: bit for bit, for a rank holding some of the
    receivers, messages that differ from the senders' own vectors, and links withheld (a term from a neighbour
    not heard is the receiver's own vector)."""
    from p2pfl.comm.inbox import LinkArrays, SenderInbox
    from p2pfl.gossip.rules import sender_sums

    monkeypatch.setattr(rules, "SLOT_BLOCK_BYTES", block_bytes)
    graph = topologies.build("random", 70, seed=8, p=0.1)
    schedule = NetworkSchedule(70, seed=9, graph=graph, **options)
    gen = np.random.default_rng(2)
    for t in range(1, 5):
        net = schedule.at(t)
        links = {p: tuple(q for q in senders if gen.random() > 0.1) for p, senders in net.incoming.items()}
        mine = sorted(p for p in net.active if gen.random() < 0.6)
        own = {p: torch.from_numpy(gen.standard_normal(40)).float() for p in mine}
        by_sender = {q: torch.from_numpy(gen.standard_normal(40)).float() for q in range(70)}
        inbox = SenderInbox(by_sender, links, LinkArrays.of(links), mine)
        got = sender_sums(own, inbox, net)
        assert got is not None and sorted(got) == mine
        for p in mine:
            assert inbox[p] == {q: by_sender[q] for q in links[p]}
            assert torch.equal(got[p], weighted_sum(own[p], inbox[p], net.row(p)))
