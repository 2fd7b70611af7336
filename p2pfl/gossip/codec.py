"""What goes on the wire for a vector: a codec encodes on the sender's side, once for every receiver (co-located
or remote, so results never depend on placement), and decodes on the receiver's. The identity today; a
compressor is one more class here. A payload may be any tensor (size and dtype free): the transport tells the
receiver what came."""
from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import torch

from p2pfl.byzantine import Robust


class Codec:
    """The identity: the vector itself travels (co-located receivers see the sender's tensor, no copy)."""

    def encode(self, peer: int, vector: torch.Tensor, round: int) -> torch.Tensor:
        """The payload `peer` sends for `vector` in `round`."""
        return vector

    def decode(self, sender: int, payload: torch.Tensor, round: int) -> torch.Tensor:
        """The vector a receiver reads from `sender`'s payload."""
        return payload

    @property
    def passes_through(self) -> bool:
        """Whether `decode` hands every payload back as it came (then the receivers need no decoding pass)."""
        return type(self).decode is Codec.decode

    def bind(self, cfg: Any, algorithm: Any) -> None:
        """Once the run's method (`algorithm`, a p2pfl.method.Algorithm) is set up, what the codec takes from it
        (a compressor under --compress-scope tensor: its mixed vector's layout); the identity takes nothing."""


class Wrapping(Codec):
    """A codec around another: decodes as `inner` does; subclasses change what the sender encodes."""

    def __init__(self, inner: Codec) -> None:
        self.inner = inner

    def decode(self, sender: int, payload: torch.Tensor, round: int) -> torch.Tensor:
        return self.inner.decode(sender, payload, round)

    @property
    def passes_through(self) -> bool:
        return type(self).decode is Wrapping.decode and self.inner.passes_through


class Attacking(Wrapping):
    """--byzantine: attackers send what their attack makes of their vector (p2pfl.byzantine.attacks), then
    `inner`'s encoding of it; under an omniscient attack (alie, dissensus) they send their own vector, which the
    receiver's side replaces (p2pfl.byzantine.omniscient). What an attacker remembers across rounds (stale its
    first message) is `memory(peer)`, a dict in its peer record, so checkpoints keep it."""

    def __init__(self, inner: Codec, robust: Robust, seed: int, memory: Callable[[int], dict]) -> None:
        super().__init__(inner)
        self.robust, self.seed, self.memory = robust, seed, memory

    def encode(self, peer: int, vector: torch.Tensor, round: int) -> torch.Tensor:
        if peer in self.robust.byzantine and not self.robust.omniscient:
            memory = self.memory(peer)
            attack = self.robust.attacker
            vector = attack.send(vector, seed=self.seed, peer=peer, round=round, scale=self.robust.scale,
                                 first=memory.get("first"))
            attack.remember(memory, vector)
        return self.inner.encode(peer, vector, round)


class Poisoned(Wrapping):
    """--fault nan@PEER:ROUND: the listed senders send `inner`'s encoding of an all-NaN vector (a test of the
    non-finite checks; a compressor's message of it decodes non-finite)."""

    def __init__(self, inner: Codec, peers: Collection[int]) -> None:
        super().__init__(inner)
        self.peers = peers

    def encode(self, peer: int, vector: torch.Tensor, round: int) -> torch.Tensor:
        return self.inner.encode(peer, torch.full_like(vector, float("nan")) if peer in self.peers else vector, round)
