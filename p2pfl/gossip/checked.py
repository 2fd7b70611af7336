"""The checked exchange: the one place a round's messages are exchanged and validated.

encode (the codec, on the sender's side) -> transport -> decode -> tamper (omniscient attackers' messages made
for each receiver, p2pfl.byzantine.omniscient) -> observe (curious peers look, p2pfl.curious) -> validate
what arrived -> agree on the rejected links across ranks -> the round's network without them. Every caller that
sends something in a round (gossip, the server's hops, a returning peer's pull, FeatARC's clusters, FedMuscle's
representations, the drift measurement) goes through a round's `Exchanges` (p2pfl.gossip.exchanges), which
combines, judges and agrees once for all the exchanges it started; what they rejected comes back as a value
(`Delivery.events`) for the round record.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from p2pfl.comm.transport import Inbox, Links, Pending, Transport
from p2pfl.comm.world import World
from p2pfl.gossip.codec import Codec, Poisoned
from p2pfl.network.schedule import RoundNetwork

Pair = tuple[int, int]  # (receiver, sender)
#: The receiver-side stage of omniscient attackers: (receiver, what it got) -> what it gets instead.
Tamper = Callable[[int, dict[int, torch.Tensor]], dict[int, torch.Tensor]]


def finite(t: torch.Tensor) -> bool:
    """Whether every value of `t` is finite (no NaN, no ±Inf)."""
    return bool(torch.isfinite(t).all())


#: Values checked at a time by `nonfinite` when it stacks alike vectors (a block a core's cache holds).
CHECK_BLOCK = 1 << 18


def nonfinite(vectors: Mapping[int, torch.Tensor]) -> list[int]:
    """The peers whose vector holds a non-finite value, in `vectors`' order: one check per block of alike
    vectors stacked (thousands of small ones cost a few calls), each on its own otherwise."""
    peers = list(vectors)
    if not peers:
        return []
    first = vectors[peers[0]]
    if any(v.shape != first.shape or v.dtype != first.dtype or v.device != first.device for v in vectors.values()):
        return [p for p in peers if not finite(vectors[p])]
    per = max(1, CHECK_BLOCK // max(1, first.numel()))
    bad: list[int] = []
    for start in range(0, len(peers), per):
        chunk = peers[start:start + per]
        with torch.no_grad():
            block = torch.stack([vectors[p] for p in chunk]).reshape(len(chunk), -1)
        ok = torch.isfinite(block).all(dim=1).tolist()
        bad += [p for p, fine in zip(chunk, ok) if not fine]
    return bad


@dataclass(frozen=True)
class Events:
    """What a round's exchanges did, for its record: the (receiver, sender) messages rejected, the
    (receiver, neighbour) a robust aggregator cut and the (receiver, trim) where its neighbourhood made the
    aggregator assume fewer attackers than --trim, for this rank's receivers."""

    rejected: tuple[Pair, ...] = ()
    cut: tuple[Pair, ...] = ()
    lowered: tuple[tuple[int, int], ...] = ()

    def __add__(self, other: Events) -> Events:
        return Events(*(tuple(sorted({*mine, *theirs})) for mine, theirs in
                        ((self.rejected, other.rejected), (self.cut, other.cut), (self.lowered, other.lowered))))


@dataclass
class Faults:
    """Fault injection from outside the transport and the codec (--fault): `silent` peers send nothing to other
    ranks (their neighbours time out), `poisoned` peers' payloads are NaN; the local loop reads `diverging`, the
    peers whose local update of the current round turns non-finite (their loss is NaN)."""

    silent: set[int] = field(default_factory=set)
    poisoned: set[int] = field(default_factory=set)
    diverging: set[int] = field(default_factory=set)


@dataclass
class Delivery:
    """One checked exchange's result: every local receiver's decoded messages (`inbox`), those rejected, the
    network without the rejected links (`net`, when the exchange ran along a round's network) and, when a rule
    combined them (p2pfl.gossip.exchanges), every local receiver's combined vector."""

    inbox: Inbox
    rejected: frozenset[Pair]
    net: RoundNetwork | None
    events: Events
    pending: Pending | None = None
    combined: dict[int, torch.Tensor] = field(default_factory=dict)

    def release(self) -> None:
        """Done with the messages (nothing keeps a reference to one): the transport may reuse their memory."""
        if self.pending is not None:
            self.pending.release()

    def kept(self, peer: int) -> dict[int, torch.Tensor]:
        """The messages `peer` keeps: not rejected, and on a link the surviving network still carries."""
        received = self.inbox.get(peer, {})
        alive = self.net.incoming.get(peer, ()) if self.net is not None else received
        return {q: v for q, v in received.items() if (peer, q) not in self.rejected and q in alive}


def failing(inbox: Inbox, receivers: Iterable[int], valid: Callable[[torch.Tensor], bool]) -> list[Pair]:
    """The (receiver, sender) messages of `receivers` that `valid` rejects. Each distinct message is judged once:
    a sender's decoded payload is one tensor for all its receivers, a forged one is its receiver's own."""
    verdicts: dict[int, bool] = {}
    bad = []
    for p in sorted(receivers):
        for q, v in inbox[p].items():
            if id(v) not in verdicts:
                verdicts[id(v)] = valid(v)
            if not verdicts[id(v)]:
                bad.append((p, q))
    return bad


class Handle:
    """A started checked exchange: compute meanwhile, then `wait()` for its `Delivery`."""

    def __init__(self, checked: CheckedExchange, pending: Pending, codec: Codec, round: int,
                 net: RoundNetwork | None, valid: Callable[[torch.Tensor], bool] | None,
                 tamper: Tamper | None = None) -> None:
        self._c, self._pending, self._codec, self._round, self._net, self._valid = (checked, pending, codec,
                                                                                   round, net, valid)
        self._tamper = tamper

    def wait(self) -> Delivery:
        """The decoded messages (tampered with, given a `tamper` stage); validated and agreed on unless `valid`
        was None (then nothing is rejected: p2pfl.gossip.exchanges judges and agrees, or nothing needs it)."""
        received = self._pending.wait()
        if self._codec.passes_through:
            inbox = received
        else:  # a sender's payload is the same tensor for all its receivers here: decode it once
            decoded = {q: self._codec.decode(q, v, self._round) for got in received.values() for q, v in got.items()}
            inbox = {p: {q: decoded[q] for q in got} for p, got in received.items()}
        if self._tamper is not None:
            inbox = {p: self._tamper(p, got) for p, got in inbox.items()}
        for observe in self._c.observers:  # curious peers look at what they got (p2pfl.curious)
            observe(self._round, inbox)
        if self._valid is None:
            return Delivery(inbox, frozenset(), self._net, Events(), self._pending)
        rejected = self._c.agree(self._round, [failing(inbox, inbox, self._valid)])[0]
        mine = tuple(sorted(pair for pair in rejected if pair[0] in inbox))
        net = self._net.without(rejected) if self._net is not None and rejected else self._net
        return Delivery(inbox, rejected, net, Events(rejected=mine), self._pending)


class CheckedExchange:
    """Encode, exchange, decode, validate, agree: see the module docstring."""

    def __init__(self, transport: Transport, world: World, codec: Codec | None = None, faults: Faults | None = None,
                 reject_nonfinite: bool = True) -> None:
        self.transport = transport
        self.world = world
        self.faults = faults or Faults()
        self.codec = Poisoned(codec or Codec(), self.faults.poisoned)
        #: False (--on-nonfinite abort): a non-finite message ends the job instead of being rejected.
        self.reject_nonfinite = reject_nonfinite
        #: Called with (round, inbox) for every delivered exchange, before it is judged; they only look.
        self.observers: list[Callable[[int, Inbox], None]] = []

    def start(self, vectors: Mapping[int, torch.Tensor], round: int, links: Links, net: RoundNetwork | None = None,
              valid: Callable[[torch.Tensor], bool] | None = finite, codec: Codec | None = None,
              tamper: Tamper | None = None) -> Handle:
        """Encode every local sender's vector and start the exchange along `links`; at `wait`, `tamper` (the
        omniscient attackers) rewrites each receiver's decoded messages and `valid` (default: finite) judges
        them and the ranks agree on the rejected ones (None: no check; p2pfl.gossip.exchanges does its own)."""
        codec = self.codec if codec is None else codec
        payloads = {p: codec.encode(p, v, round) for p, v in vectors.items()}
        pending = self.transport.start(payloads, round, links, withheld=self.faults.silent)
        return Handle(self, pending, codec, round, net, valid, tamper)

    def exchange(self, vectors: Mapping[int, torch.Tensor], round: int, links: Links,
                 net: RoundNetwork | None = None, valid: Callable[[torch.Tensor], bool] | None = finite,
                 codec: Codec | None = None, tamper: Tamper | None = None) -> Delivery:
        """`start(...).wait()`."""
        return self.start(vectors, round, links, net, valid, codec, tamper).wait()

    def agree(self, round: int, exchanges: Sequence[Iterable[Pair]]) -> list[frozenset[Pair]]:
        """Every rank's rejected messages of each of `exchanges` (one collective for all of them). With
        reject_nonfinite off, raise naming the first of the first exchange that has one."""
        parts = self.world.allgather([sorted(set(pairs)) for pairs in exchanges],
                                     caller="CheckedExchange.agree (rejected links)")
        found = [sorted({tuple(pair) for part in parts for pair in part[k]}) for k in range(len(exchanges))]
        first = next((pairs[0] for pairs in found if pairs), None)
        if first is not None and not self.reject_nonfinite:
            receiver, sender = first
            raise RuntimeError(f"non-finite message from peer {sender} to peer {receiver} in round {round} "
                               "(--on-nonfinite abort)")
        return [frozenset(pairs) for pairs in found]  # type: ignore[misc]
