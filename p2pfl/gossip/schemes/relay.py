"""RelaySGD (Vogels et al. 2021) runs on a spanning tree T (`RelayTree`: the topology itself when it is a tree, else
the BFS tree of the graph rooted at peer 0; the manifest's `relay_tree` says which). With x½_i = x_i − ηg_i, peer i
sends each tree neighbour j its own message, m_{i→j} = x½_i + Σ_{k∈T(i), k≠j} m_{k→i} and the count
c_{i→j} = 1 + Σ_{k≠j} c_{k→i} (the messages it received last round), one message of d + 1 values per tree link,
carried by one checked exchange per neighbour slot (the s-th tree neighbour of every peer). Then
x_i⁺ = (x½_i + Σ_j m_{j→i} + (K − 1 − Σ_j c_{j→i}) x_init) / K with this round's messages. The counts say how many
peers' models the sums hold (a message from d hops away arrives after d rounds); the missing K − 1 − Σc are filled
with x_init, the model every peer starts from (x^(0), as in the authors' simulator: `init_state`), which each peer
keeps as `x0`, its model the first round it runs the scheme (all peers start equal: x₀ = 1 on the quadratic
problem, one seeded initial model for the learners). With the models held fixed, x_i + Σ_j m_{j→i} is the network's
sum and Σ_j c_{j→i} = K − 1 after diam(T) rounds: a tree averages exactly. RelaySGD averages uniformly (no
--weight-by-data).

Failures, by this rule of ours (the authors' Table 5 runs RelaySGD on networks that drop messages): a tree link the
round's network does not carry (a failed link, an end sitting out or crashed, a rejected message) delivers nothing,
and its receiver reuses the last message and count it got on that link (zero before the first), so the relay sums
heal once the link is back; a peer sitting out sends nothing and keeps its state. A crashed peer inside the tree
cuts it for good: each side goes on with the last sums that crossed the cut (no spanning tree is rebuilt). The tree
itself is fixed: changing graphs (resampled, dynamic and one-way topologies) are refused before training
(`check_network`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import networkx as nx
import torch

from p2pfl.gossip.mix import Gossip, Mixed
from p2pfl.gossip.schemes import SCHEMES
from p2pfl.gossip.schemes.base import Scheme, State
from p2pfl.network.schedule import RoundNetwork
from p2pfl.options import Check

if TYPE_CHECKING:
    from p2pfl.network import NetworkSchedule


@dataclass(frozen=True)
class RelayTree:
    """RelaySGD's spanning tree: each peer's tree neighbours (ascending) and where the tree came from."""

    neighbours: dict[int, tuple[int, ...]]
    source: str  # "topology" (the graph is a tree) or "bfs-spanning-tree"
    root: int = 0

    @classmethod
    def of(cls, graph: nx.Graph) -> RelayTree:
        """The graph itself when it is a tree, else its BFS spanning tree rooted at peer 0; a ValueError when the
        graph is not connected (no spanning tree)."""
        if not nx.is_connected(graph):
            raise ValueError("--gossip relay: needs a connected topology (a spanning tree of every peer)")
        tree, source = (graph, "topology") if nx.is_tree(graph) else (nx.bfs_tree(graph, 0), "bfs-spanning-tree")
        undirected = nx.Graph(tree)
        return cls({int(p): tuple(sorted(int(q) for q in undirected[p])) for p in sorted(graph)}, source)

    @property
    def edges(self) -> list[tuple[int, int]]:
        return [(p, q) for p, nbrs in self.neighbours.items() for q in nbrs if p < q]

    @property
    def slots(self) -> int:
        """The most tree neighbours a peer has: the number of exchanges a round takes."""
        return max((len(n) for n in self.neighbours.values()), default=0)

    def describe(self) -> dict[str, Any]:
        """The manifest's `relay_tree` entry."""
        return {"source": self.source, "root": self.root, "edges": [list(e) for e in self.edges]}

    def links(self, slot: int, net: RoundNetwork) -> dict[int, tuple[int, ...]]:
        """Receiver -> the senders whose `slot`-th tree neighbour it is, on the links the round carries (both ends
        active, the link up): the same on every rank."""
        out: dict[int, list[int]] = {}
        carried = net.incoming
        for i, nbrs in self.neighbours.items():
            if len(nbrs) > slot:
                j = nbrs[slot]
                if i in net.active and j in net.active and i in carried[j]:
                    out.setdefault(j, []).append(i)
        return {j: tuple(senders) for j, senders in sorted(out.items())}


def _relayed(half: torch.Tensor, s: State, sources: Sequence[int]) -> torch.Tensor:
    """[x½ + Σ_k m_k, 1 + Σ_k c_k] over the last messages from `sources` (in ascending order)."""
    out = torch.cat([half, torch.ones(1, dtype=half.dtype, device=half.device)])
    for k in sources:
        if f"m{k}" in s:
            out[:-1] += s[f"m{k}"]
            out[-1:] += s[f"c{k}"]
    return out


@SCHEMES.register("relay")
class Relay(Scheme):
    """RelaySGD over the run's spanning tree (`prepare` builds it from the graph; a test may pass its own)."""

    paper = "Vogels et al. 2021, RelaySGD"

    def __init__(self, tree: RelayTree | None = None) -> None:
        self.tree = tree

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        super().check(cfg, check)
        check(not cfg.weight_by_data, "weight_by_data",
              "--gossip relay averages uniformly over its tree; run it without --weight-by-data")

    @classmethod
    def check_network(cls, schedule: NetworkSchedule, graph: nx.Graph, rounds: int) -> None:
        """Refuse a graph that changes or has one-way links (RelaySGD relays over one fixed undirected spanning
        tree), and one with no spanning tree."""
        if schedule.kind != "static" or schedule.directed:
            raise ValueError(f"--gossip relay: relays over one fixed spanning tree, but this network is "
                             f"{schedule.kind}{' and one-way' if schedule.directed else ''}; use a static topology "
                             "(chain, binary-tree, cycle, ...) with --link-failure, --participation or --churn for a "
                             "network that fails")
        RelayTree.of(graph)

    def prepare(self, ctx: Any) -> None:
        self.tree = RelayTree.of(ctx.graph)
        ctx.record_manifest(relay_tree=self.tree.describe())

    def round(self, gossip: Gossip, x: dict[int, torch.Tensor], g: dict[int, torch.Tensor], lr: float,
              state: dict[int, State], net: RoundNetwork, round: int, sizes: Sequence[float] | None = None) -> Mixed:
        """Per tree-neighbour slot one checked exchange of [m, c], all started at once (one agreement a round;
        slot s keeps only the links the slots before it left); what arrives replaces the receiver's last
        message on that link, what does not leaves it as it was."""
        tree = self.tree
        assert tree is not None, "--gossip relay: prepare(ctx) builds the run's RelayTree first"
        K = net.n_peers
        half = {p: x[p] - lr * g[p] for p in x}
        for p in x:
            if "x0" not in state[p]:
                state[p]["x0"] = x[p].clone()
        sent = {p: {j: _relayed(half[p], state[p], [k for k in tree.neighbours[p] if k != j])
                    for j in tree.neighbours[p]} for p in x}
        exchanges = gossip.exchanges(net, round)
        slots = [exchanges.start({p: sent[p][nbrs[slot]] for p in x if len(nbrs := tree.neighbours[p]) > slot},
                                 lambda n, slot=slot: tree.links(slot, n)) for slot in range(tree.slots)]
        for started in slots:
            got = started.result()
            for p in got.inbox:
                for j, v in got.kept(p).items():
                    state[p][f"m{j}"], state[p][f"c{j}"] = v[:-1].clone(), v[-1:].clone()
            got.release()
        mixed = {}
        for p in x:
            total = _relayed(half[p], state[p], tree.neighbours[p])
            mixed[p] = (total[:-1] + (K - total[-1]) * state[p]["x0"]) / K
        assert exchanges.net is not None
        return Mixed(mixed, exchanges.net, exchanges.events)
