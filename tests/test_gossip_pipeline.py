"""The message pipeline in one process: a new codec and a new combine rule need no change to the transport, a
codec runs on the sender's side for every receiver, rejected links come back as values (docs/CONVENTIONS.md)."""
from __future__ import annotations

import networkx as nx
import torch

import topologies
from p2pfl.byzantine import Robust
from p2pfl.comm import Placement, Transport, World
from p2pfl.gossip import CheckedExchange, Codec, Gossip, Rule
from p2pfl.network import NetworkSchedule

K = 5


class Half(Codec):
    """float16 on the wire (CONVENTIONS.md, example (a))."""

    def encode(self, peer, vector, round):
        return vector.to(torch.float16)

    def decode(self, sender, payload, round):
        return payload.to(torch.float64)


class Lazy(Rule):
    """x_i <- (x_i + Σ_j W_ij x_j) / 2 (CONVENTIONS.md, example (b))."""

    def combine(self, peer, own, received, net):
        mixed, _ = super().combine(peer, own, received, net)
        return mixed.add_(own).mul_(0.5), []


def _setup(codec: Codec | None = None) -> tuple[Gossip, Transport, object, dict[int, torch.Tensor], torch.Tensor]:
    graph = topologies.build("cycle", K)
    world = World.detect()
    transport = Transport(world, graph, Placement(K, 1), timeout=30)
    gossip = Gossip(CheckedExchange(transport, world, codec=codec), Robust(frozenset()), seed=0)
    net = NetworkSchedule(K, graph=graph).at(1)
    x = torch.randn(K, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    W = torch.from_numpy(topologies.mixing_matrix(nx.convert_node_labels_to_integers(graph, ordering="sorted")))
    return gossip, transport, net, {p: x[p].clone() for p in range(K)}, W @ x


def test_a_new_codec_changes_the_wire_and_nothing_else() -> None:
    gossip, transport, net, vectors, _ = _setup(Half())
    mixed = gossip.mix(vectors, net, round=1)
    x = torch.stack([vectors[p] for p in range(K)])
    half = x.to(torch.float16).to(torch.float64)  # what every receiver reads, its own vector stays exact
    for p in range(K):
        want = sum(w * (x[j] if j == p else half[j]) for j, w in net.row(p))
        assert torch.allclose(mixed.vectors[p], want, rtol=0, atol=1e-12)
    assert sum(transport.stats.peer_sent.values()) == 2 * K * 64 * 2  # two neighbours each, 2 bytes a value
    # per link, both ways round the cycle: the sizes the simulated clock times (p2pfl.network.timing)
    assert dict(transport.stats.link_sent) == {(q, p): 64 * 2 for p in range(K) for q in ((p - 1) % K, (p + 1) % K)}


def test_a_new_rule_runs_with_the_same_checks() -> None:
    gossip, _, net, vectors, wx = _setup()
    x = torch.stack([vectors[p] for p in range(K)])
    mixed = gossip.combine(vectors, net, 1, Lazy())
    for p in range(K):
        assert torch.allclose(mixed.vectors[p], (x[p] + wx[p]) / 2, rtol=0, atol=1e-12)
    gossip.checked.faults.poisoned.add(2)  # peer 2's messages turn NaN: its links fail, the rest re-weights
    mixed = gossip.combine(vectors, net, 2, Lazy())
    assert mixed.events.rejected == ((1, 2), (3, 2))
    cut = net.without([(1, 2), (3, 2)])
    assert mixed.net.incoming == cut.incoming
    for p in range(K):
        want = sum(w * x[j] for j, w in cut.row(p))
        assert torch.allclose(mixed.vectors[p], (x[p] + want) / 2, rtol=0, atol=1e-12)


def test_the_plain_mix_equals_w_times_x_bitwise_in_row_order() -> None:
    gossip, _, net, vectors, wx = _setup()
    mixed = gossip.mix(vectors, net, round=1)
    for p in range(K):
        ordered = torch.zeros(64, dtype=torch.float64)
        for j, w in net.row(p):
            ordered.add_(vectors[j], alpha=w)
        assert torch.equal(mixed.vectors[p], ordered)
        assert torch.allclose(mixed.vectors[p], wx[p], rtol=0, atol=1e-12)
    assert mixed.events.rejected == () and mixed.events.cut == ()


def test_a_lazy_scheme_halves_once_when_its_vectors_cannot_stack() -> None:
    """schemes.Lazy builds its combine_all on Rule's: where the vectors differ in dtype (no stacking) the plain
    sums are still what it halves, so every receiver equals its own `combine`."""
    from p2pfl.gossip.schemes.exact_diffusion import Lazy as SchemeLazy

    _, _, net, vectors, _ = _setup()
    vectors[0] = vectors[0].float()
    inbox = {p: {j: vectors[j] for j, _ in net.row(p) if j != p} for p in range(K)}
    rule = SchemeLazy()
    mixed = rule.combine_all(vectors, inbox, net)
    for p in range(K):
        want, _ = rule.combine(p, vectors[p].clone(), inbox[p], net)
        assert torch.allclose(mixed[p][0].double(), want.double(), rtol=0, atol=1e-6), p
