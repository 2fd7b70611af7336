"""Gossip over the checked exchange: a round's exchanges (`exchanges`), one round's mix with a combine rule, the
server's two hops, a returning peer's pull and a moved model's hand-over. Each returns the mixed vectors and the
round's events as values."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch

from p2pfl.byzantine import Robust, Scratch
from p2pfl.comm.world import World
from p2pfl.gossip.checked import CheckedExchange, Events, Tamper
from p2pfl.gossip.codec import Attacking, Codec, Poisoned
from p2pfl.gossip.exchanges import Exchanges
from p2pfl.gossip.rules import RobustRule, Rule, weighted_sum
from p2pfl.network.schedule import HUB, RoundNetwork


@dataclass
class Mixed:
    """A mix's result: the local receivers' new vectors, the network it ran on (the rejected links removed)
    and what it rejected and cut."""

    vectors: dict[int, torch.Tensor]
    net: RoundNetwork
    events: Events


class Gossip:
    """The run's gossip: `mix` picks the server's two hops (--mixing server), the robust rule (--byzantine or a
    robust --aggregator) or the W-weighted mean."""

    def __init__(self, checked: CheckedExchange, robust: Robust, seed: int, compressor: Codec | None = None) -> None:
        self.checked, self.robust, self.seed = checked, robust, seed
        self.scratch = Scratch()  # the robust aggregators' room, reused round after round
        #: --compress: the codec of the W-weighted mix's messages (None: the exchange's own, dense); the other
        #: exchanges (the server's hops, a returning peer's pull) stay dense.
        self.compressor = None if compressor is None else Poisoned(compressor, checked.faults.poisoned)

    def mix(self, vectors: dict[int, torch.Tensor], net: RoundNetwork, round: int,
            sizes: Sequence[float] | None = None, memory: Callable[[int], dict] | None = None) -> Mixed:
        """x_i <- the rule's combination for every local active peer (`vectors` holds theirs)."""
        if net.server:
            return self.via_server(vectors, net, round, sizes)
        if self.robust.active:
            assert memory is not None, "robust gossip needs the peers' attacker memory"
            codec = Attacking(self.checked.codec, self.robust, self.seed, memory)
            rule = RobustRule(self.robust, sizes, self.scratch)
            return self.combine(vectors, net, round, rule, codec, self.adversary(vectors, net, sizes))
        return self.combine(vectors, net, round, Rule(sizes), self.compressor)

    def adversary(self, vectors: dict[int, torch.Tensor], net: RoundNetwork, sizes: Sequence[float] | None = None
                  ) -> Tamper | None:
        """The receiver-side stage of an omniscient attack (p2pfl.byzantine.omniscient) on this round's mix: each
        honest receiver's Byzantine messages made from its own vector, its inbox and its row of W. None for the
        other attacks (made by the sender's codec) and without attackers."""
        if not self.robust.byzantine or not self.robust.omniscient:
            return None
        adversary = self.robust.adversary()
        return lambda p, got: adversary.forge(p, vectors[p], got, net.row(p, sizes))

    @property
    def world(self) -> World:
        """The ranks (a scheme's own collectives: CHOCO's lagging links)."""
        return self.checked.world

    def exchanges(self, net: RoundNetwork | None, round: int) -> Exchanges:
        """A round's checked exchanges on `net` (p2pfl.gossip.exchanges): start them, then read their results;
        the ranks agree once on what all of them rejected."""
        return Exchanges(self.checked, net, round)

    def combine(self, vectors: dict[int, torch.Tensor], net: RoundNetwork, round: int, rule: Rule,
                codec: Codec | None = None, tamper: Tamper | None = None) -> Mixed:
        """Exchange along the round's links (`tamper`: omniscient attackers on the receivers' side) and combine
        with `rule`. A non-finite message is rejected: every rank learns of it, the link counts as failed for the
        round and the weights are recomputed, so the result equals a round in which that link failed. Only the
        messages behind suspect results are checked."""
        exchanges = self.exchanges(net, round)
        mixed = exchanges.start(vectors, rule=rule, codec=codec, tamper=tamper).result()
        assert exchanges.net is not None
        return Mixed(mixed.combined, exchanges.net, exchanges.events)

    def via_server(self, vectors: dict[int, torch.Tensor], net: RoundNetwork, round: int,
                   sizes: Sequence[float] | None = None) -> Mixed:
        """The star as a server: the leaves the hub reaches send it their vectors, the hub averages them with its
        own (the row of W, data-weighted with `sizes`) and sends the average back, all in this round. Every byte
        is counted where it travels: a leaf sends and receives one vector, the hub as many as it serves. A leaf
        whose vector is not finite is left out of the average and gets nothing back (its link failed)."""
        members = [j for j, _ in net.row(HUB)] if HUB in net.active else []
        up = {HUB: tuple(j for j in members if j != HUB)} if len(members) > 1 else {}
        exchanges = self.exchanges(net, round)
        delivered = exchanges.start(vectors, up).result()
        assert delivered.net is not None
        net = delivered.net
        if delivered.rejected:
            up = {HUB: tuple(j for j, _ in net.row(HUB) if j != HUB)} if HUB in net.active else {}
        average: dict[int, torch.Tensor] = {}
        if HUB in delivered.inbox:
            average[HUB] = weighted_sum(vectors[HUB], delivered.inbox[HUB], net.row(HUB, sizes))
        delivered.release()
        down = {j: (HUB,) for j in up.get(HUB, ())}
        back = exchanges.start({**vectors, **average}, down, valid=None).result()
        out = {p: v.clone() for p, v in vectors.items()}
        out.update(average)
        for leaf, received in back.inbox.items():
            out[leaf] = received[HUB].clone()
        back.release()
        return Mixed(out, net, delivered.events)

    def pull(self, vectors: dict[int, torch.Tensor], net: RoundNetwork, round: int, peers: Iterable[int],
             sizes: Sequence[float] | None = None) -> Mixed:
        """For each of `peers` (the rejoining ones), the mix of its fresh in-neighbours' vectors with its own
        weight left out and the row renormalised: a returning peer takes the current neighbourhood model, as a
        FedAvg client takes the current global one. A peer with no fresh neighbour this round is left out;
        non-finite vectors are rejected."""
        links = {i: tuple(j for j in net.incoming[i] if j in net.fresh) for i in sorted(peers)}
        delivered = self.exchanges(None, round).start(vectors, links).result()
        out = {}
        for peer, received in delivered.inbox.items():
            row = [(j, w) for j, w in net.row(peer, sizes) if j in received and (peer, j) not in delivered.rejected]
            if row:
                total = sum(w for _, w in row)
                out[peer] = weighted_sum(vectors[peer], received, [(j, w / total) for j, w in row])
        delivered.release()
        return Mixed(out, net, delivered.events)

    def handover(self, vectors: dict[int, torch.Tensor], net: RoundNetwork, round: int) -> Mixed:
        """Each receiver of `net.handover` takes its sender's vector as it is (teleport: the models move to the
        round's active peers); `vectors` holds the local senders'. One dense message per move, counted as every
        message is; a non-finite one is rejected and its receiver keeps its own vector."""
        links = {i: (j,) for i, j in sorted(net.handover.items())}
        delivered = self.exchanges(None, round).start(vectors, links).result()
        out = {peer: received[net.handover[peer]].clone() for peer, received in delivered.inbox.items()
               if (peer, net.handover[peer]) not in delivered.rejected and net.handover[peer] in received}
        delivered.release()
        return Mixed(out, net, delivered.events)
