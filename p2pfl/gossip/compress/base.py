"""The compressors' common part: a codec whose payload is a message (p2pfl.gossip.compress.message) of some values
and packed bits, made by `compress` on the sender's side and expanded back to the dense vector by `expand` on the
receiver's. The sender's own copy of what it sent (CHOCO's public copy x̂) is `decode(peer, encode(...))`, the same
computation every receiver makes."""
from __future__ import annotations

import math
from fractions import Fraction

import torch

from p2pfl.gossip.codec import Codec
from p2pfl.gossip.compress import message
from p2pfl.gossip.compress.message import Message
from p2pfl.seeding import numpy_rng, torch_generator


def kept(ratio: float, d: int) -> int:
    """k = ⌈ρ·d⌉, with ρ read as the decimal it is written as (0.01 · 300 is 3, not 4 by float rounding)."""
    return min(d, math.ceil(Fraction(repr(float(ratio))) * d))


def purpose(round: int) -> str:
    """The purpose of a peer's compression stream in `round`: (seed, peer, round, "compress")."""
    return f"compress/{round}"


def generator(seed: int, peer: int, round: int, device: torch.device) -> torch.Generator:
    """The torch stream of `peer`'s random compression choices in `round` (QSGD's rounding)."""
    return torch_generator(seed, peer, purpose(round), device)


def coordinates(seed: int, peer: int, round: int, d: int, k: int) -> torch.Tensor:
    """k distinct coordinates of a d-vector, ascending, from `peer`'s stream of `round` (random-k: the sender and
    every receiver draw the same ones, so only the values travel)."""
    drawn = numpy_rng(seed, peer, purpose(round)).choice(d, size=k, replace=False, shuffle=False)
    return torch.from_numpy(drawn).sort().values


class Compressor(Codec):
    """A codec whose message is a few values and packed bits (see the module docstring)."""

    def encode(self, peer: int, vector: torch.Tensor, round: int) -> torch.Tensor:
        flat = vector.reshape(-1)
        values, bits = self.compress(peer, flat, round)
        return message.pack(flat.numel(), values, bits)

    def decode(self, sender: int, payload: torch.Tensor, round: int) -> torch.Tensor:
        return self.expand(sender, message.unpack(payload, self.values), round)

    def size(self, d: int, dtype: torch.dtype) -> int:
        """The exact bytes of the message of a d-vector of `dtype`."""
        return message.size(d, dtype, self.values(d), self.bits(d))

    def values(self, d: int) -> int:
        """How many numbers (in the vector's dtype) the message of a d-vector holds."""
        raise NotImplementedError

    def bits(self, d: int) -> int:
        """How many bytes of packed bits the message of a d-vector holds."""
        raise NotImplementedError

    def compress(self, peer: int, vector: torch.Tensor, round: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The values and packed bits `peer` sends for the flat `vector` in `round`."""
        raise NotImplementedError

    def expand(self, sender: int, msg: Message, round: int) -> torch.Tensor:
        """The dense vector `sender`'s message stands for."""
        raise NotImplementedError
