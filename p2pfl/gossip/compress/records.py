"""What a compressed run adds to manifest.json: manifest["compression"], the codec, its parameters and the exact
bytes of one message of the mixed vector next to the dense vector's (p2pfl.run records it after set-up, when
--compress is not none), with its --compress-scope and the segments a message compresses on their own (1: the whole
vector; under tensor scope the model's tensors, and the bytes are the per-tensor message's)."""
from __future__ import annotations

from typing import TypedDict

import torch

from p2pfl.gossip.compress.base import Compressor
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
    scope: str  # --compress-scope: vector or tensor (then `kept` is Σ_i k_i and message_bytes
    # 16 + Σ_i values(d_i)·itemsize + Σ_i bits(d_i))
    segments: int  # the parts compressed each on its own: 1 (vector), the mixed vector's non-empty tensors (tensor)


class CompressedManifest(Manifest, total=False):
    """manifest.json of a run with --compress other than none."""

    compression: Compression


def describe(codec: Compressor, consensus_step: float | None, d: int, dtype: torch.dtype) -> Compression:
    """The manifest entry of `codec` on a d-vector of `dtype`, its parameters from its `record` (a plug-in's own
    keys follow the built-ins'); `consensus_step` is γ under --gossip choco, else None; the scope is tensor for a
    codec bound to a layout (`Compressor.per_tensor`)."""
    message = codec.size(d, dtype)
    dense = d * torch.empty((), dtype=dtype).element_size()
    entry = Compression(codec=codec.name, ratio=None, kept=None, qsgd_levels=None, consensus_step=consensus_step,
                        d=d, dtype=str(dtype).removeprefix("torch."), message_bytes=message, dense_bytes=dense,
                        bytes_ratio=message / dense, scope="vector" if codec.layout is None else "tensor",
                        segments=len(codec.segments(d)))
    entry.update(codec.record(d))  # type: ignore[typeddict-item]
    return entry
