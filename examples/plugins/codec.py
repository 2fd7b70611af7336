"""A codec of one's own, as a plug-in: top-k with its values quantised to b bits.

    python -m p2pfl.run --plugin examples/plugins/codec.py --compress quantised-top-k --compress-ratio 0.1 \
        --qtopk-bits 4 ...

The k = ⌈ρ·d⌉ coordinates of largest magnitude travel (ρ: --compress-ratio, top-k's option, read here too), each
value rounded to the nearest of the 2L + 1 levels −L..L times s = max|v_kept| / L, L = 2^(b−1) − 1 (b = --qtopk-bits,
2 to 8). A message (p2pfl.gossip.compress.message) is one scale s in the vector's dtype, then the k indices at
⌈log2 d⌉ bits each, then the k codes at b bits each: 16 + itemsize + ⌈k·⌈log2 d⌉/8⌉ + ⌈k·b/8⌉ bytes. A codec is a
`Compressor` registered with ``@CODECS.register``: `from_config` builds it from its options, `values`/`bits`
size its message, `compress`/`expand` make and read it, `record` adds its parameters to manifest["compression"];
`Compressor.check` already refuses the runs no codec can compress (a method or scheme that does not mix by W).
"""
from __future__ import annotations

from typing import Any

import torch

from p2pfl.gossip.compress import CODECS, bits
from p2pfl.gossip.compress.base import Sparse
from p2pfl.gossip.compress.message import Message
from p2pfl.options import opt


@CODECS.register("quantised-top-k")
class QuantisedTopK(Sparse):
    """The k largest |v_l|, their indices, and their values on 2L + 1 levels of one scale."""

    class Options:
        qtopk_bits: int = opt(8, "quantised-top-k: bits b of each kept value (2L + 1 levels, L = 2^(b-1) - 1)",
                              section="compression", bounds="[2, 8]")

    def __init__(self, ratio: float, value_bits: int) -> None:
        super().__init__(ratio)
        self.value_bits = value_bits
        self.levels = 2 ** (value_bits - 1) - 1

    @classmethod
    def from_config(cls, cfg: Any) -> QuantisedTopK:
        return cls(cfg.compress_ratio, cfg.qtopk_bits)

    def values(self, d: int) -> int:
        return 1  # the scale; the kept values travel as codes

    def bits(self, d: int) -> int:
        k = self.k(d)
        return bits.packed_size(k, bits.width_of(d - 1)) + bits.packed_size(k, self.value_bits)

    def record(self, d: int) -> dict[str, Any]:
        return {**super().record(d), "value_bits": self.value_bits}

    def compress(self, peer: int, vector: torch.Tensor, round: int) -> tuple[torch.Tensor, torch.Tensor]:
        d, k = vector.numel(), self.k(vector.numel())
        index = torch.topk(vector.abs(), k, sorted=False).indices.sort().values
        kept = vector[index]
        scale = kept.abs().max() / self.levels
        safe = torch.where(scale > 0, scale, torch.ones_like(scale))
        code = torch.nan_to_num((kept / safe).round(), nan=0.0).clamp(-self.levels, self.levels)
        packed = torch.cat([bits.pack(index, bits.width_of(d - 1)),
                            bits.pack(code.to(torch.int64) + self.levels, self.value_bits)])
        return scale.reshape(1), packed

    def expand(self, sender: int, msg: Message, round: int) -> torch.Tensor:
        k = self.k(msg.d)
        split = bits.packed_size(k, bits.width_of(msg.d - 1))
        index = bits.unpack(msg.bits[:split], k, bits.width_of(msg.d - 1)).long()
        code = bits.unpack(msg.bits[split:], k, self.value_bits).to(torch.int64) - self.levels
        out = torch.zeros(msg.d, dtype=msg.dtype, device=msg.values.device)
        out[index] = code.to(msg.dtype) * msg.values[0]
        return out
