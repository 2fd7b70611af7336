"""top-k: the k = ⌈ρ·d⌉ coordinates of largest magnitude travel, as k values and k indices (δ = k/d, SPEC §8).
The indices are packed at ⌈log2 d⌉ bits each (p2pfl.gossip.compress.bits), so a message is 16 + k·(itemsize +
⌈log2 d⌉/8) bytes: under 2% of the dense float32 vector at ρ = 0.01 once d is past a few thousand. Ties at the k-th
magnitude are broken by torch.topk (which of the equal coordinates is kept is unspecified, but the same on the same
device for the same vector); a NaN counts as the largest magnitude, so a non-finite vector sends a non-finite
message."""
from __future__ import annotations

from typing import Any

import torch

from p2pfl.gossip.compress import CODECS, bits
from p2pfl.gossip.compress.base import Sparse
from p2pfl.gossip.compress.message import Message
from p2pfl.options import opt


@CODECS.register("top-k")
class TopK(Sparse):
    """The k largest |v_l| and their indices."""

    class Options:
        """ρ, shared with random-k (which reads cfg.compress_ratio)."""

        compress_ratio: float = opt(0.1, "share ρ of coordinates top-k and random-k send: k = ⌈ρ·d⌉, ρ in (0, 1]",
                                    section="compression", bounds="(0, 1]")

    @classmethod
    def from_config(cls, cfg: Any) -> TopK:
        return cls(cfg.compress_ratio)

    def bits(self, d: int) -> int:
        return bits.packed_size(self.values(d), bits.width_of(d - 1))

    def compress(self, peer: int, vector: torch.Tensor, round: int) -> tuple[torch.Tensor, torch.Tensor]:
        d = vector.numel()
        index = torch.topk(vector.abs(), self.values(d), sorted=False).indices.sort().values
        return vector[index], bits.pack(index, bits.width_of(d - 1))

    def expand(self, sender: int, msg: Message, round: int) -> torch.Tensor:
        index = bits.unpack(msg.bits, msg.values.numel(), bits.width_of(msg.d - 1)).long()
        out = torch.zeros(msg.d, dtype=msg.dtype, device=msg.values.device)
        out[index] = msg.values
        return out
