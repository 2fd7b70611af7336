"""A round's exchanges started together and agreed once (p2pfl.gossip.exchanges) give, bit for bit, what the same
exchanges give run one after another, each agreed before the next starts: gradient tracking's y over the network
x's exchange left, RelaySGD's slots each over the links the slots before it left, with rejections in either."""
from __future__ import annotations

import networkx as nx
import pytest
import torch

import topologies
from p2pfl.byzantine import Robust
from p2pfl.comm import Placement, Transport, World
from p2pfl.gossip import CheckedExchange, Events, Gossip, Rule
from p2pfl.gossip.mix import Mixed
from p2pfl.gossip.schemes.gradient_tracking import GradientTracking
from p2pfl.gossip.schemes.relay import Relay, RelayTree, _relayed
from p2pfl.network import NetworkSchedule

K, D = 6, 16
NAN = float("nan")


def _gossip(graph: nx.Graph) -> tuple[Gossip, list[int]]:
    world = World.detect()
    checked = CheckedExchange(Transport(world, graph, Placement(graph.number_of_nodes(), 1), timeout=30), world)
    agreements = []
    agree = checked.agree

    def counted(round, exchanges):  # noqa: ANN001, ANN202
        agreements.append(len(exchanges))
        return agree(round, exchanges)

    checked.agree = counted  # type: ignore[method-assign]
    return Gossip(checked, Robust(frozenset()), seed=0), agreements


def _vectors(seed: int, nan_at: tuple[int, ...]) -> dict[int, torch.Tensor]:
    out = {p: v.clone() for p, v in enumerate(torch.randn(K, D, generator=torch.Generator().manual_seed(seed),
                                                           dtype=torch.float64))}
    for p in nan_at:
        out[p][3] = NAN
    return out


def _same(a: Mixed, b: Mixed) -> None:
    assert a.vectors.keys() == b.vectors.keys()
    for p in a.vectors:
        torch.testing.assert_close(a.vectors[p], b.vectors[p], rtol=0, atol=0, equal_nan=True)
    assert a.net.incoming == b.net.incoming
    assert (a.net.W != b.net.W).nnz == 0
    assert a.events == b.events


def _one_after_another(gossip: Gossip, x, y, net) -> tuple[Mixed, Mixed]:
    """x's exchange agreed, then y's over the network it left (GradientTracking before its exchanges travelled
    together)."""
    mixed = gossip.combine(x, net, 1, Rule())
    tracked = gossip.combine(y, mixed.net, 1, Rule())
    events = mixed.events + tracked.events
    return Mixed(mixed.vectors, tracked.net, events), Mixed(tracked.vectors, tracked.net, events)


@pytest.mark.parametrize("x_nan, y_nan", [((), ()), ((2,), ()), ((2,), (2,)), ((), (4,)), ((2,), (3,)),
                                          ((1, 2), (2, 5))])
def test_two_exchanges_started_together_equal_them_one_after_another(x_nan, y_nan) -> None:
    """y's messages on a link x's exchange lost (x_nan 2, y_nan 3: 3 -> 2) are dropped, their verdicts ignored."""
    graph = topologies.build("cycle", K)
    net = NetworkSchedule(K, graph=graph).at(1)
    x, y = _vectors(0, x_nan), _vectors(1, y_nan)
    gossip, agreements = _gossip(graph)
    want_x, want_y = _one_after_another(gossip, x, y, net)
    assert agreements == [1, 1]
    agreements.clear()
    exchanges = gossip.exchanges(net, 2)
    first, second = exchanges.start(x, rule=Rule()), exchanges.start(y, rule=Rule())
    got_x, got_y = first.result().combined, second.result().combined
    assert agreements == [2]  # one collective for both
    _same(Mixed(got_x, exchanges.net, exchanges.events), want_x)
    _same(Mixed(got_y, exchanges.net, exchanges.events), want_y)
    assert bool(exchanges.events.rejected) == bool(x_nan or y_nan)


@pytest.mark.parametrize("nan_at", [(), (2,), (1, 4)])
def test_a_gradient_tracking_round_agrees_once(nan_at) -> None:
    graph = topologies.build("cycle", K)
    net = NetworkSchedule(K, graph=graph).at(1)
    x, y = _vectors(0, ()), _vectors(1, nan_at)
    gossip, agreements = _gossip(graph)
    zero = {p: torch.zeros(D, dtype=torch.float64) for p in range(K)}
    want_x, want_y = _one_after_another(gossip, {p: x[p] - 1.0 * y[p] for p in range(K)}, y, net)
    agreements.clear()
    state = {p: {"wy": y[p], "g": zero[p]} for p in range(K)}  # y = wy + g - g: the tracker as given
    got = GradientTracking().round(gossip, x, zero, 1.0, state, net, 2)
    assert agreements == [2]
    _same(got, want_x)
    _same(Mixed({p: s["wy"] for p, s in state.items()}, got.net, got.events), want_y)


def _relay_one_after_another(gossip: Gossip, tree: RelayTree, x: dict[int, torch.Tensor], state, net, round: int
                             ) -> Mixed:
    """RelaySGD's round as it ran before its slots travelled together: each slot's exchange agreed before the
    next, over the links the network it left carries."""
    half = dict(x)
    for p in x:
        state[p].setdefault("x0", x[p].clone())
    sent = {p: {j: _relayed(half[p], state[p], [k for k in tree.neighbours[p] if k != j])
                for j in tree.neighbours[p]} for p in x}
    events = Events()
    for slot in range(tree.slots):
        vectors = {p: sent[p][nbrs[slot]] for p in x if len(nbrs := tree.neighbours[p]) > slot}
        got = gossip.checked.exchange(vectors, round, tree.links(slot, net), net=net)
        for p in got.inbox:
            for j, v in got.kept(p).items():
                state[p][f"m{j}"], state[p][f"c{j}"] = v[:-1].clone(), v[-1:].clone()
        got.release()
        net, events = got.net, events + got.events
    mixed = {}
    for p in x:
        total = _relayed(half[p], state[p], tree.neighbours[p])
        mixed[p] = (total[:-1] + (K - total[-1]) * state[p]["x0"]) / K
    return Mixed(mixed, net, events)


@pytest.mark.parametrize("nan_at", [(), (2,), (1, 2), (0, 3)])
def test_relay_slots_travel_together_and_equal_their_exchanges_one_after_another(nan_at) -> None:
    graph = topologies.build("chain", K)
    tree = RelayTree.of(graph)
    net = NetworkSchedule(K, graph=graph).at(1)
    zero = {p: torch.zeros(D, dtype=torch.float64) for p in range(K)}
    gossip, agreements = _gossip(graph)
    want_state: dict[int, dict] = {p: {} for p in range(K)}
    got_state: dict[int, dict] = {p: {} for p in range(K)}
    for round, seed in ((1, 0), (2, 1)):  # the second round relays what the first left
        x = _vectors(seed, nan_at if round == 2 else ())
        want = _relay_one_after_another(gossip, tree, x, want_state, net, round)
        agreements.clear()
        got = Relay(tree).round(gossip, x, zero, 1.0, got_state, net, round)
        assert agreements == [tree.slots]
        _same(got, want)
        for p in range(K):
            assert want_state[p].keys() == got_state[p].keys()
            for key, v in want_state[p].items():
                torch.testing.assert_close(got_state[p][key], v, rtol=0, atol=0, equal_nan=True)
