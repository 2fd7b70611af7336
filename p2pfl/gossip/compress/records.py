"""What a compressed run adds to manifest.json: manifest["compression"], the codec, its parameters and the exact
bytes of one message of the mixed vector next to the dense vector's (p2pfl.run records it after set-up, when
--compress is not none)."""
from __future__ import annotations

from typing import TypedDict

import torch

from p2pfl.gossip.compress.base import Compressor, kept
from p2pfl.records import Manifest


class Compression(TypedDict):
    """manifest["compression"]: --compress and its parameters (None where the codec or scheme has none), the
    mixed vector (its length d and dtype) and the bytes of one message of it, compressed and dense."""

    codec: str  # --compress
    ratio: float | None  # --compress-ratio ρ (top-k, random-k)
    kept: int | None  # k = ⌈ρ·d⌉ coordinates a message holds (top-k, random-k)
    qsgd_levels: int | None  # --qsgd-levels s (qsgd)
    consensus_step: float | None  # --consensus-step γ (--gossip choco)
    d: int  # the mixed vector's length
    dtype: str  # its value type, which the message's values keep
    message_bytes: int  # one message of it: Compressor.size(d, dtype), header included
    dense_bytes: int  # d · itemsize: one dense message
    bytes_ratio: float  # message_bytes / dense_bytes


class CompressedManifest(Manifest, total=False):
    """manifest.json of a run with --compress other than none."""

    compression: Compression


def describe(name: str, codec: Compressor, ratio: float, levels: int, consensus_step: float | None, d: int,
             dtype: torch.dtype) -> Compression:
    """The manifest entry of `codec` (--compress `name`, ratio ρ, levels s) on a d-vector of `dtype`;
    `consensus_step` is γ under --gossip choco, else None."""
    sparse = name in ("top-k", "random-k")
    message = codec.size(d, dtype)
    dense = d * torch.empty((), dtype=dtype).element_size()
    return Compression(codec=name, ratio=ratio if sparse else None, kept=kept(ratio, d) if sparse else None,
                       qsgd_levels=levels if name == "qsgd" else None, consensus_step=consensus_step, d=d,
                       dtype=str(dtype).removeprefix("torch."), message_bytes=message, dense_bytes=dense,
                       bytes_ratio=message / dense)
