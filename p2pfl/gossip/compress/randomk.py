"""random-k: k = ⌈ρ·d⌉ coordinates drawn from the sender's stream (seed, peer, round, "compress") travel as their
k values alone: every receiver draws the same coordinates from the same stream, so the message is 16 + k·itemsize
bytes. Not rescaled by d/k (SPEC §8: the contractive random-k, δ = k/d, not the unbiased one). A vector with a
non-finite coordinate sends NaN values, so the receiver's check rejects it as it would the dense vector, even when
the bad coordinate is not drawn."""
from __future__ import annotations

from typing import Any

import torch

from p2pfl.gossip.compress import CODECS
from p2pfl.gossip.compress.base import Sparse, coordinates
from p2pfl.gossip.compress.message import Message


@CODECS.register("random-k")
class RandomK(Sparse):
    """k coordinates from the stream, values only (ρ: top-k's --compress-ratio)."""

    def __init__(self, ratio: float, seed: int) -> None:
        super().__init__(ratio)
        self.seed = seed

    @classmethod
    def from_config(cls, cfg: Any) -> RandomK:
        return cls(cfg.compress_ratio, cfg.seed)

    def bits(self, d: int) -> int:
        return 0

    def coordinates(self, peer: int, round: int, d: int) -> torch.Tensor:
        """The coordinates `peer` sends in `round` (ascending)."""
        return coordinates(self.seed, peer, round, d, self.values(d))

    def compress(self, peer: int, vector: torch.Tensor, round: int) -> tuple[torch.Tensor, torch.Tensor]:
        values = vector[self.coordinates(peer, round, vector.numel()).to(vector.device)]
        if not bool(torch.isfinite(vector).all()):
            values = torch.full_like(values, float("nan"))
        return values, torch.empty(0, dtype=torch.uint8, device=vector.device)

    def expand(self, sender: int, msg: Message, round: int) -> torch.Tensor:
        out = torch.zeros(msg.d, dtype=msg.dtype, device=msg.values.device)
        out[self.coordinates(sender, round, msg.d).to(out.device)] = msg.values
        return out
