"""QSGD with s levels (Alistarh et al. 2017, as CHOCO uses it, SPEC §8): each |v_l|/‖v‖₂ is rounded stochastically
to one of the levels 0, 1/s, ..., 1 (up with probability equal to the remainder, so unbiased), keeps its sign, and
the result is rescaled by 1/τ, τ = 1 + min(d/s², √d/s), which makes it contractive with δ = 1/τ (Koloskova et al.
2019, Lemma). The rounding's uniforms come from the sender's stream (seed, peer, round, "compress"), drawn on the
vector's device. A message is one scale ‖v‖₂/(s·τ) in the vector's dtype and, per coordinate, its level in
⌈log2(s + 1)⌉ bits and a sign bit, packed: 16 + itemsize + ⌈d·(⌈log2(s + 1)⌉ + 1)/8⌉ bytes."""
from __future__ import annotations

import math
from typing import Any

import torch

from p2pfl.gossip.compress import CODECS, bits
from p2pfl.gossip.compress.base import Compressor, generator
from p2pfl.gossip.compress.message import Message
from p2pfl.options import opt


def tau(d: int, levels: int) -> float:
    """QSGD's variance factor τ = 1 + min(d/s², √d/s); 1/τ is the rescaling and δ."""
    return 1.0 + min(d / levels ** 2, math.sqrt(d) / levels)


@CODECS.register("qsgd")
class QSGD(Compressor):
    """Stochastic rounding to s levels with sign, rescaled by 1/τ."""

    paper = "Alistarh et al. 2017; Koloskova et al. 2019"

    class Options:
        """s."""

        qsgd_levels: int = opt(4, "levels s of qsgd's stochastic rounding, >= 1 (⌈log2(s + 1)⌉ + 1 bits a "
                                  "coordinate)", section="compression", bounds=">= 1")

    def __init__(self, levels: int, seed: int) -> None:
        self.levels, self.seed = levels, seed
        self.width = bits.width_of(levels) + 1  # the level, then the sign as the lowest bit

    @classmethod
    def from_config(cls, cfg: Any) -> QSGD:
        return cls(cfg.qsgd_levels, cfg.seed)

    def record(self, d: int) -> dict[str, Any]:
        return {"qsgd_levels": self.levels}

    def values(self, d: int) -> int:
        return 1

    def bits(self, d: int) -> int:
        return bits.packed_size(d, self.width)

    def compress(self, peer: int, vector: torch.Tensor, round: int) -> tuple[torch.Tensor, torch.Tensor]:
        s, d = self.levels, vector.numel()
        norm = torch.linalg.vector_norm(vector)
        scaled = vector.abs() / torch.where(norm > 0, norm, torch.ones_like(norm)) * s
        uniform = torch.rand(d, generator=generator(self.seed, peer, round, vector.device), dtype=vector.dtype,
                             device=vector.device)
        floor = scaled.floor()
        level = (floor + (uniform < scaled - floor).to(vector.dtype)).clamp_(0, s)
        level = torch.nan_to_num(level, nan=0.0)  # a non-finite vector travels as a non-finite scale
        code = (level.to(torch.int64) << 1) | (vector < 0).to(torch.int64)
        return (norm / (s * tau(d, s))).reshape(1), bits.pack(code, self.width)

    def expand(self, sender: int, msg: Message, round: int) -> torch.Tensor:
        code = bits.unpack(msg.bits, msg.d, self.width).to(torch.int64)
        signed = (code >> 1).to(msg.dtype) * (1 - 2 * (code & 1)).to(msg.dtype)
        return signed * msg.values[0]
