"""What an exchange delivers: per local receiver, its senders' payloads. Every receiver of a sender holds the same
tensor, so the inbox keeps one tensor a sender and the call's links as arrays; a receiver's {sender: payload} is
built only when something looks at it, and a linear combination gathers by sender without walking them
(p2pfl.gossip.rules.sender_sums)."""
from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

Links = Mapping[int, Sequence[int]]  # receiving peer -> the peers it hears from (a global view, the same on every rank)


@dataclass(frozen=True, eq=False)
class LinkArrays:
    """A links mapping as arrays: its receivers in the mapping's order, each one's count of senders and the
    senders one receiver after another (ascending within a receiver, as the links give them)."""

    receivers: np.ndarray
    lengths: np.ndarray
    senders: np.ndarray

    @classmethod
    def of(cls, links: Links) -> LinkArrays:
        receivers = np.fromiter(links.keys(), dtype=np.int64, count=len(links))
        lengths = np.fromiter((len(s) for s in links.values()), dtype=np.int64, count=len(links))
        senders = np.fromiter(itertools.chain.from_iterable(links.values()), dtype=np.int64,
                              count=int(lengths.sum()))
        return cls(receivers, lengths, senders)

    @cached_property
    def row_of(self) -> dict[int, int]:
        """Receiver -> its position in `receivers`."""
        return {int(p): i for i, p in enumerate(self.receivers.tolist())}

    @cached_property
    def starts(self) -> np.ndarray:
        """Where each receiver's senders begin in `senders` (one more entry: the end)."""
        return np.concatenate([[0], np.cumsum(self.lengths)])

    @cached_property
    def fanout(self) -> dict[int, int]:
        """Sender -> how many receivers hear it (only senders heard at all)."""
        senders, counts = np.unique(self.senders, return_counts=True)
        return dict(zip(senders.tolist(), counts.tolist()))

    @cached_property
    def keys(self) -> np.ndarray:
        """The (receiver, sender) pairs as sorted int64 keys receiver · 2^32 + sender (a pair's membership by
        binary search)."""
        return np.sort((np.repeat(self.receivers, self.lengths) << 32) + self.senders)

    def heard(self, receivers: np.ndarray, senders: np.ndarray) -> np.ndarray:
        """Whether each (receivers[i], senders[i]) is a link."""
        want = (receivers.astype(np.int64) << 32) + senders
        at = np.searchsorted(self.keys, want)
        found = np.zeros(want.shape, dtype=bool)
        inside = at < self.keys.size
        found[inside] = self.keys[at[inside]] == want[inside]
        return found


class SenderInbox(Mapping[int, dict[int, torch.Tensor]]):
    """Per local receiver (in `receivers`' order), {sender: payload} over its links, ascending by sender; the
    payload of sender q is `by_sender[q]` for every receiver of q."""

    def __init__(self, by_sender: Mapping[int, torch.Tensor], links: Links, arrays: LinkArrays,
                 receivers: Sequence[int]) -> None:
        self.by_sender, self.links, self.arrays = by_sender, links, arrays
        self._receivers = list(receivers)
        self._members = set(self._receivers)
        self._built: dict[int, dict[int, torch.Tensor]] = {}

    def __getitem__(self, peer: int) -> dict[int, torch.Tensor]:
        got = self._built.get(peer)
        if got is None:
            if peer not in self._members:
                raise KeyError(peer)
            got = self._built[peer] = {q: self.by_sender[q] for q in sorted(self.links[peer])}
        return got

    def __iter__(self) -> Iterator[int]:
        return iter(self._receivers)

    def __len__(self) -> int:
        return len(self._receivers)

    def __contains__(self, peer: object) -> bool:
        return peer in self._members
