"""Scaled sign (SPEC §8): ‖v‖₁/d · sign(v), one scale in the vector's dtype and one bit per coordinate, packed:
16 + itemsize + ⌈d/8⌉ bytes. A message has d bits, so a zero coordinate cannot travel as 0: it decodes as +scale
(its error is the same |0 − scale|² either way, and ‖v − Q(v)‖² = ‖v‖² − ‖v‖₁²/d holds with or without zeros)."""
from __future__ import annotations

from typing import Any

import torch

from p2pfl.gossip.compress import CODECS, bits
from p2pfl.gossip.compress.base import Compressor
from p2pfl.gossip.compress.message import Message


@CODECS.register("sign")
class Sign(Compressor):
    """‖v‖₁/d times the signs (zero counts as +)."""

    @classmethod
    def from_config(cls, cfg: Any) -> Sign:
        return cls()

    def values(self, d: int) -> int:
        return 1

    def bits(self, d: int) -> int:
        return bits.packed_size(d, 1)

    def compress(self, peer: int, vector: torch.Tensor, round: int) -> tuple[torch.Tensor, torch.Tensor]:
        d = vector.numel()
        wide = torch.promote_types(vector.dtype, torch.float32)  # ‖v‖₁ of a long half vector overflows in half
        scale = (torch.linalg.vector_norm(vector, ord=1, dtype=wide) / max(d, 1)).to(vector.dtype)
        return scale.reshape(1), bits.pack((vector < 0).to(torch.uint8), 1)

    def expand(self, sender: int, msg: Message, round: int) -> torch.Tensor:
        negative = bits.unpack(msg.bits, msg.d, 1).to(msg.dtype)
        return (1 - 2 * negative) * msg.values[0]
