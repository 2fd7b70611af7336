"""Combine rules: how a receiver makes one vector of its own and what it kept from its neighbours. A rule is one
class: `combine` (the vector and the neighbours it cut), `suspect` (whether a result calls for checking the
messages behind it) and `events` (what else the round record says of a receiver's combination). Rules are
registered in `RULES` by name (`@RULES.register(name)`, with an `Options` section if a rule has options of its
own); a scheme or method builds the rule it combines with."""
from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from p2pfl.byzantine import Robust, Scratch, aggregate, lowered_trim
from p2pfl.comm.inbox import SenderInbox
from p2pfl.gossip.checked import Events, finite, nonfinite
from p2pfl.network.schedule import RoundNetwork
from p2pfl.registry import Registry

#: The combine rules, by name (no option selects one: the run's scheme and robustness do).
RULES: Registry[Any] = Registry("combine rule", package="p2pfl.gossip.rules")


def weighted_sum(own: torch.Tensor, received: dict[int, torch.Tensor], row: list[tuple[int, float]]) -> torch.Tensor:
    """Σ_j w_j x_j in the row's (ascending) order, x_j = own where j sent nothing (the peer itself): bitwise the
    same whichever ranks the peers sit on."""
    acc = torch.zeros_like(own)
    for j, w in row:
        acc.add_(received[j] if j in received else own, alpha=w)
    return acc


#: Vectors of at most this many values are summed stacked on the CPU. Measured (benchmarks/bench_scale.py, "gossip
#: sums", 2-core CPU, stacked/loop): 0.68 at d = 100, 1.0 at 1,024, 2.9 at 4,096, 6.7 at 65,536, where gathering
#: the stack costs more than torch's ~5 µs a term saves. On a GPU the stack always runs (a kernel a slot, not a
#: launch a term).
STACK_MAX_CPU = 512


def stacked_sums(own: Mapping[int, torch.Tensor], inbox: Mapping[int, Mapping[int, torch.Tensor]],
                 rows: Mapping[int, list[tuple[int, float]]]) -> dict[int, torch.Tensor] | None:
    """`weighted_sum` of every receiver of `rows` at once, bitwise the same: the distinct vectors stacked into one
    [vectors × parameters] buffer, then one fused multiply-add per slot of the rows (slot k: every receiver's k-th
    term, in its row's ascending order, torch's add with alpha), over the receivers whose rows are that long.
    The receivers are ordered longest row first, so slot k's are a prefix of the buffer and the sum runs in
    place. Each receiver's sum depends on its own row and vectors only, never on which others share the stack.
    None when the vectors differ in shape, dtype or device (then each is summed on its own)."""
    receivers = sorted(rows, key=lambda p: (-len(rows[p]), p))
    if not receivers:
        return {}
    index: dict[int, int] = {}
    stack: list[torch.Tensor] = []
    for x in itertools.chain((own[p] for p in receivers), *(inbox.get(p, {}).values() for p in receivers)):
        if index.setdefault(id(x), len(stack)) == len(stack):
            stack.append(x)
    sources = []
    for p in receivers:
        got, mine = inbox.get(p, {}), own[p]
        sources.append([index[id(got.get(j, mine))] for j, _ in rows[p]])
    lengths = np.fromiter((len(s) for s in sources), dtype=np.int64, count=len(sources))
    take = np.fromiter(itertools.chain.from_iterable(sources), dtype=np.int64, count=int(lengths.sum()))
    weight = np.fromiter((w for p in receivers for _, w in rows[p]), dtype=np.float64, count=take.size)
    return _slot_sums(receivers, lengths, take, weight, stack)


def sender_sums(own: Mapping[int, torch.Tensor], inbox: SenderInbox, net: RoundNetwork
                ) -> dict[int, torch.Tensor] | None:
    """`stacked_sums` of W's rows (`net.row`) over an inbox that holds one tensor a sender, bitwise the same: the
    terms gathered with array code from W's CSR arrays and the inbox's links (a term from a sender the
    receiver did not hear is its own vector, as in `weighted_sum`), no per-term Python. None as stacked_sums."""
    receivers = np.fromiter(inbox, dtype=np.int64, count=len(inbox))
    if receivers.size == 0:
        return {}
    indptr, indices = net.W.indptr.astype(np.int64), net.W.indices.astype(np.int64)
    lo, lengths = indptr[receivers], indptr[receivers + 1] - indptr[receivers]
    order = np.lexsort((receivers, -lengths))  # longest row first, then by peer: stacked_sums' order
    receivers, lo, lengths = receivers[order], lo[order], lengths[order]
    start = np.cumsum(lengths) - lengths
    at = np.repeat(lo - start, lengths) + np.arange(int(lengths.sum()))
    sender, weight = indices[at], net.row_weights[at]
    receiver = np.repeat(receivers, lengths)
    heard = inbox.arrays.heard(receiver, sender)
    senders = np.unique(sender[heard])
    slot = np.zeros(net.n_peers, dtype=np.int64)
    slot[receivers] = np.arange(receivers.size)
    from_sender = np.zeros(net.n_peers, dtype=np.int64)
    from_sender[senders] = receivers.size + np.arange(senders.size)
    take = np.where(heard, from_sender[sender], slot[receiver])
    stack = [own[p] for p in receivers.tolist()] + [inbox.by_sender[q] for q in senders.tolist()]
    return _slot_sums(receivers.tolist(), lengths, take, weight, stack)


def _slot_sums(receivers: list[int], lengths: np.ndarray, take: np.ndarray, weight: np.ndarray,
               stack: list[torch.Tensor]) -> dict[int, torch.Tensor] | None:
    """Receiver -> its `_slot_product` sum over the vectors of `stack`, each in the vectors' shape; None when
    they differ in shape, dtype or device."""
    first = stack[0]
    if any(x.shape != first.shape or x.dtype != first.dtype or x.device != first.device for x in stack):
        return None
    acc = _slot_product(lengths, take, weight, torch.stack(stack).reshape(len(stack), -1))
    return dict(zip(receivers, acc.reshape(len(receivers), *first.shape).unbind(0)))


#: Bytes of a receiver block's sums kept while every slot adds into it (CPU): the block stays in a core's cache
#: instead of every slot streaming all the receivers' sums through memory.
SLOT_BLOCK_BYTES = 256 << 10


def _slot_product(lengths: np.ndarray, take: np.ndarray, weight: np.ndarray, vectors: torch.Tensor
                  ) -> torch.Tensor:
    """Each receiver's Σ_k weight_k · vectors[take_k] over its terms (receivers longest first, `lengths` terms
    each, one after another in `take` and `weight`), slot by slot (k ascending) for a block of receivers at a
    time: a receiver's terms are added in its row's order whatever block it is in."""
    n, width = lengths.size, vectors.shape[1]
    longest = int(lengths[0]) if n else 0
    row = np.repeat(np.arange(n), lengths)
    slot = np.arange(row.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    takes = np.zeros((longest, n), dtype=np.int64)  # [slot × receiver]: a slot's receivers contiguous
    takes[slot, row] = take
    weights = np.zeros((longest, n))
    weights[slot, row] = weight
    takes_t = torch.from_numpy(takes).to(vectors.device)
    weights_t = torch.from_numpy(weights).to(vectors.device, vectors.dtype)  # each weight rounded once, as alone
    acc = torch.zeros((n, width), dtype=vectors.dtype, device=vectors.device)
    per = max(1, n) if vectors.is_cuda else max(1, SLOT_BLOCK_BYTES // max(1, width * vectors.element_size()))
    for lo in range(0, n, per):
        hi = min(n, lo + per)
        counts = (lengths[lo:hi, None] > np.arange(lengths[lo])).sum(axis=0)
        for k, count in enumerate(counts.tolist()):
            acc[lo:lo + count].addcmul_(vectors.index_select(0, takes_t[k, lo:lo + count]),
                                        weights_t[k, lo:lo + count].unsqueeze(1))
    return acc


@RULES.register("mean")
class Rule:
    """The interface; also the W-weighted mean x_i <- Σ_j W_ij x_j (with `sizes`, W_ij scaled by n_j and the row
    renormalised)."""

    #: Whether the rule is a fixed weighted sum per receiver (`row`): then a rank's receivers may combine at once
    #: (`stacked_sums`, in the same order; whether they do depends on the vectors only, never on the layout).
    linear = True

    def __init__(self, sizes: Sequence[float] | None = None) -> None:
        self.sizes = sizes

    def row(self, peer: int, received: Mapping[int, torch.Tensor], net: RoundNetwork) -> list[tuple[int, float]]:
        """The (source, weight) terms of a linear rule's sum, in order; a source not in `received` is the peer's
        own vector."""
        return net.row(peer, self.sizes)

    def combine(self, peer: int, own: torch.Tensor, received: dict[int, torch.Tensor], net: RoundNetwork
                ) -> tuple[torch.Tensor, list[int]]:
        return weighted_sum(own, received, self.row(peer, received, net)), []

    def combine_all(self, own: Mapping[int, torch.Tensor], inbox: Mapping[int, dict[int, torch.Tensor]],
                    net: RoundNetwork) -> dict[int, tuple[torch.Tensor, list[int]]]:
        """`combine` of every receiver of `inbox`: stacked when the rule is linear and the vectors alike. A linear
        rule's sums are its rows' (`weighted_sum`) even when they cannot stack, so a subclass whose `combine_all`
        builds on this one's (schemes.Lazy) gets the plain sums either way; a subclass that overrides `combine`
        alone (docs/CONVENTIONS.md, example (b)) is combined through it, one receiver at a time."""
        plain = type(self).combine is Rule.combine or type(self).combine_all is not Rule.combine_all
        if self.linear and plain:
            sample = next(iter(own.values()), None)
            stackable = sample is not None and (sample.is_cuda or sample.numel() <= STACK_MAX_CPU)
            if stackable and type(self) is Rule and self.sizes is None and isinstance(inbox, SenderInbox):
                by_sender = sender_sums(own, inbox, net)
                if by_sender is not None:
                    return {p: (by_sender[p], []) for p in inbox}
            rows = {p: self.row(p, got, net) for p, got in inbox.items()}
            sums = stacked_sums(own, inbox, rows) if stackable else None
            if sums is None:
                sums = {p: weighted_sum(own[p], got, rows[p]) for p, got in inbox.items()}
            return {p: (sums[p], []) for p in inbox}
        return {p: self.combine(p, own[p], got, net) for p, got in inbox.items()}

    def suspect(self, peer: int, result: torch.Tensor) -> bool:
        """Whether the messages behind `result` must be checked: any non-finite input makes a weighted sum (and
        every robust aggregator: the sum, min/max or norm) non-finite, so only such results are."""
        return not finite(result)

    def suspects(self, results: Mapping[int, tuple[torch.Tensor, list[int]]]) -> list[int]:
        """The receivers whose result must be checked (`suspect`), in `results`' order; for this rule's test, one
        check over the results stacked where they are alike."""
        if type(self).suspect is not Rule.suspect:
            return [p for p, (v, _) in results.items() if self.suspect(p, v)]
        return nonfinite({p: v for p, (v, _) in results.items()})

    def events(self, peer: int, kept: dict[int, torch.Tensor]) -> Events:
        """What the round record says of `peer`'s combination of `kept` (the messages left once the rejected
        ones are out) beyond what it cut: nothing here."""
        return Events()


@RULES.register("robust")
class RobustRule(Rule):
    """--aggregator with --byzantine: honest peers combine with the run's robust aggregator (p2pfl.byzantine)
    and report where their neighbourhood lowered its trim; attackers keep their own vector and check what they
    heard."""

    linear = False

    def __init__(self, robust: Robust, sizes: Sequence[float] | None = None, scratch: Scratch | None = None) -> None:
        super().__init__(sizes)
        self.robust, self.scratch = robust, scratch or Scratch()

    def combine(self, peer: int, own: torch.Tensor, received: dict[int, torch.Tensor], net: RoundNetwork
                ) -> tuple[torch.Tensor, list[int]]:
        if peer in self.robust.byzantine:
            return own, []
        return aggregate(self.robust, peer, own, received, net.row(peer, self.sizes), self.scratch)

    def suspect(self, peer: int, result: torch.Tensor) -> bool:
        return peer in self.robust.byzantine or super().suspect(peer, result)

    def events(self, peer: int, kept: dict[int, torch.Tensor]) -> Events:
        trim = None if peer in self.robust.byzantine else lowered_trim(self.robust, len(kept))
        return Events(lowered=((peer, trim),)) if trim is not None else Events()
