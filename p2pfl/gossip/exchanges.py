"""One round's checked exchanges: exchange -> combine -> lazy check -> agree -> recombine -> release, the one call
every scheme, the server's hops, a returning peer's pull, FeatARC, FedMuscle and the drift measurement send through
(p2pfl.gossip.checked encodes, transports, decodes and tampers; this module judges and agrees).

A round (`Exchanges`, one per scheme round: `Gossip.exchanges`) starts any number of exchanges before waiting on
any (`start`: each travels at once). The first `result()` waits for every exchange started so far, combines each
with its rule optimistically on the network the round has so far, checks locally only the messages behind a
result that came out non-finite (without a rule: every message, by `valid` or the caller's `judge`), then agrees
on the rejected links of all of them in ONE collective; where anything was rejected it recombines without it, and
releases the messages a rule combined. A consumer that reads only its own receivers' messages (FedMuscle's steps)
takes each exchange's local verdicts (`local()`) and the round agrees once, at `close()`.

Exchange k of a round runs on the round's network without the links it and the exchanges before it rejected
(a rejection fails its link both ways). Links given as a function of the network (the default: its incoming links)
are those of the network the earlier exchanges left: a link rejected for gradient tracking's x fails for its y
too. Exchanges started together were all sent on the network the round had then; at the agreement the messages
on links an earlier exchange lost are dropped and their verdicts ignored, so every result, network and event is
bit for bit what the exchanges give run one after another, each agreed before the next starts, for rules whose
result is non-finite whenever a message they combine is (the linear ones; a robust rule runs alone in its round).
Only the bytes differ, and only in a round that rejected something: those dropped messages travelled.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import torch

from p2pfl.comm.transport import Inbox, Links
from p2pfl.gossip.checked import CheckedExchange, Delivery, Events, Handle, Pair, Tamper, failing, finite
from p2pfl.gossip.codec import Codec
from p2pfl.gossip.rules import Rule
from p2pfl.network.schedule import RoundNetwork

#: An exchange's links: receiver -> senders, or a function of the network the round's earlier exchanges left.
LinksOf = Links | Callable[[RoundNetwork], Links]
#: A caller's own check of an exchange's decoded messages: the (receiver, sender) ones it rejects.
Judge = Callable[[Inbox], Iterable[Pair]]


def _incoming(net: RoundNetwork) -> Links:
    return net.incoming


class Exchange:
    """One started exchange of a round: `result()` once the round agreed, `local()` before."""

    def __init__(self, owner: Exchanges, vectors: Mapping[int, torch.Tensor], links: LinksOf, handle: Handle,
                 rule: Rule | None, valid: Callable[[torch.Tensor], bool] | None, judge: Judge | None) -> None:
        self._owner, self._vectors, self._links, self._handle = owner, vectors, links, handle
        self._rule, self._valid, self._judge = rule, valid, judge
        self.checked = rule is not None or valid is not None or judge is not None  # whether the round agrees on it
        self._got: Delivery | None = None  # decoded, not yet agreed
        self._bad: list[Pair] = []  # this rank's verdicts
        self._results: dict[int, tuple[torch.Tensor, list[int]]] | None = None  # the optimistic combination
        self._done: Delivery | None = None

    def result(self) -> Delivery:
        """The exchange as the round agreed it (the round agrees first if it has not): its messages, the rejected
        ones, the network after it, its events and, with a rule, the combined vectors (`combined`)."""
        if self._done is None:
            self._owner.agree()
        assert self._done is not None
        return self._done

    def local(self) -> Delivery:
        """Its messages and this rank's own verdicts on them, before the round agrees (no collective): what each
        local receiver keeps is already final; the network and the events are the round's, at `close()`."""
        if self._done is not None:
            return self._done
        self._owner.settle()
        assert self._got is not None
        return Delivery(self._got.inbox, frozenset(self._bad), None, Events(), self._got.pending)

    def _settle(self, net: RoundNetwork | None) -> None:
        """Wait for the messages; combine optimistically on `net` and judge what needs judging (local)."""
        self._got = got = self._handle.wait()
        if self._rule is not None:
            assert net is not None, "a combine rule needs the round's network"
            self._results = self._rule.combine_all(self._vectors, got.inbox, net)
            self._bad = failing(got.inbox, self._rule.suspects(self._results), finite)
        elif self._judge is not None:
            self._bad = list(self._judge(got.inbox))
        elif self._valid is not None:
            self._bad = failing(got.inbox, got.inbox, self._valid)

    def _finish(self, agreed: frozenset[Pair], sent_on: RoundNetwork | None, net: RoundNetwork | None
                ) -> RoundNetwork | None:
        """Apply the agreed rejections on the network `net` the earlier exchanges left (this one was sent on
        `sent_on`); recombine where the network changed. Returns the network after it."""
        got = self._got
        assert got is not None
        inbox: Inbox = got.inbox
        if callable(self._links) and net is not sent_on:  # an earlier exchange lost links: not this one's
            assert net is not None
            allowed = self._links(net)
            inbox = {p: {q: v for q, v in heard.items() if q in allowed.get(p, ())} for p, heard in inbox.items()}
            agreed = frozenset(pair for pair in agreed if pair[1] in allowed.get(pair[0], ()))
        after = net.without(agreed) if net is not None and agreed else net
        mine = tuple(sorted(pair for pair in agreed if pair[0] in got.inbox))
        done = Delivery(inbox, agreed, after, Events(rejected=mine), got.pending)
        rule = self._rule
        if rule is not None:
            assert after is not None and self._results is not None
            results = self._results
            if after is not sent_on:  # the surviving graph's weights may change every row
                results = rule.combine_all(self._vectors, {p: done.kept(p) for p in inbox}, after)
            noted = (sum((rule.events(p, done.kept(p)) for p in sorted(inbox)), Events())
                     if type(rule).events is not Rule.events else Events())  # the plain rule notes nothing
            done.release()  # every result is a new tensor (or the receiver's own vector)
            cut = tuple(sorted((p, q) for p, (_, c) in results.items() for q in c))
            done = Delivery(inbox, agreed, after, done.events + noted + Events(cut=cut), None,
                            {p: v for p, (v, _) in results.items()})
        self._done, self._got, self._results = done, None, None
        return after


class Exchanges:
    """One round's checked exchanges (module docstring): `start` them, then `result()` each; `net` and `events`
    are the round's so far, `close()` agrees on what only `local()` read."""

    def __init__(self, checked: CheckedExchange, net: RoundNetwork | None, round: int) -> None:
        self.checked, self.net, self.round = checked, net, round
        self.events = Events()
        self._open: list[Exchange] = []  # started, not yet waited for
        self._settled: list[Exchange] = []  # judged locally, not yet agreed

    def start(self, vectors: Mapping[int, torch.Tensor], links: LinksOf | None = None, *, rule: Rule | None = None,
              valid: Callable[[torch.Tensor], bool] | None = finite, judge: Judge | None = None,
              codec: Codec | None = None, tamper: Tamper | None = None) -> Exchange:
        """Encode and send every local sender's vector along `links` (default: the incoming links of the network
        the earlier exchanges left); returns at once. With a `rule` the receivers combine (lazy check), else the
        messages are judged by `judge` or one by one by `valid` (None: not at all, nothing to agree on). `codec`,
        `tamper`: as CheckedExchange.start's."""
        links = _incoming if links is None else links
        sent = links(self.net) if callable(links) else links
        handle = self.checked.start(vectors, self.round, sent, valid=None, codec=codec, tamper=tamper)
        exchange = Exchange(self, vectors, links, handle, rule, valid, judge)
        self._open.append(exchange)
        return exchange

    def settle(self) -> None:
        """Wait for every exchange started and judge each locally (no collective)."""
        for exchange in self._open:
            exchange._settle(self.net)
            self._settled.append(exchange)
        self._open = []

    def agree(self) -> None:
        """Settle, then agree on every settled exchange's rejections in one collective (none when none is
        checked) and apply them in the order the exchanges started."""
        self.settle()
        batch, self._settled = self._settled, []
        checked = [e for e in batch if e.checked]
        agreed = iter(self.checked.agree(self.round, [e._bad for e in checked]) if checked else ())
        sent_on = self.net
        for exchange in batch:
            self.net = exchange._finish(next(agreed) if exchange.checked else frozenset(), sent_on, self.net)
            assert exchange._done is not None
            self.events += exchange._done.events

    def close(self) -> Events:
        """Agree on whatever is still open; the round's events."""
        if self._open or self._settled:
            self.agree()
        return self.events
