"""The compressors' common part: a codec whose payload is a message (p2pfl.gossip.compress.message) of some values
and packed bits, made by `compress` on the sender's side and expanded back to the dense vector by `expand` on the
receiver's. The sender's own copy of what it sent (CHOCO's public copy x̂) is `decode(peer, encode(...))`, the same
computation every receiver makes.

A compressor is a registered component (`@CODECS.register(name)`): built from the configuration (`from_config`),
recording its parameters in manifest["compression"] (`record`), and refusing the runs it cannot compress (`check`:
a method or scheme that does not mix by the plain W-weighted gossip).

Scope (--compress-scope, every compressor's option). Under `vector` (the default) a message encodes the whole
mixed vector as one vector. Under `tensor` the codec binds the mixed vector's layout once the method is set up
(`bind`, then `per_tensor`: the sizes of the model's tensors, in order) and a message encodes each segment as if it
were its own vector (its own k, norm, τ, scale and index width): one header, then every segment's values, then
every segment's packed bits (each byte-aligned), so its size is 16 + Σ_i values(d_i)·itemsize + Σ_i bits(d_i). The
base does this around `compress`/`expand`, so every codec, a plug-in's included, compresses per tensor unchanged;
segment i's random draws come from its own stream (`purpose`), and segment 0's is the whole vector's, so a
one-segment layout is the vector scope bit for bit."""
from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from fractions import Fraction
from typing import Any

import torch

from p2pfl.capabilities import MIXES_BY_W
from p2pfl.gossip.codec import Codec
from p2pfl.gossip.compress import message
from p2pfl.gossip.compress.message import Message
from p2pfl.options import Check, catalogue, method_options, opt
from p2pfl.registry import Component
from p2pfl.seeding import numpy_rng, torch_generator


def kept(ratio: float, d: int) -> int:
    """k = ⌈ρ·d⌉, with ρ read as the decimal it is written as (0.01 · 300 is 3, not 4 by float rounding)."""
    return min(d, math.ceil(Fraction(repr(float(ratio))) * d))


#: The segment of the mixed vector being encoded or decoded (0: the first, or the whole vector under vector scope).
_SEGMENT: ContextVar[int] = ContextVar("compress_segment", default=0)


@contextmanager
def segment(index: int) -> Iterator[None]:
    """Encode or decode segment `index` of a per-tensor message inside this block (its draws from its own stream)."""
    token = _SEGMENT.set(index)
    try:
        yield
    finally:
        _SEGMENT.reset(token)


def purpose(round: int) -> str:
    """The purpose of a peer's compression stream in `round`: (seed, peer, round, "compress"), and for segment
    i > 0 of a per-tensor message (seed, peer, round, "compress", i), so every segment draws on its own."""
    index = _SEGMENT.get()
    return f"compress/{round}" if index == 0 else f"compress/{round}/{index}"


def generator(seed: int, peer: int, round: int, device: torch.device) -> torch.Generator:
    """The torch stream of `peer`'s random compression choices in `round` (QSGD's rounding)."""
    return torch_generator(seed, peer, purpose(round), device)


def coordinates(seed: int, peer: int, round: int, d: int, k: int) -> torch.Tensor:
    """k distinct coordinates of a d-vector, ascending, from `peer`'s stream of `round` (random-k: the sender and
    every receiver draw the same ones, so only the values travel)."""
    drawn = numpy_rng(seed, peer, purpose(round)).choice(d, size=k, replace=False, shuffle=False)
    return torch.from_numpy(drawn).sort().values


def scheme_capabilities() -> dict[str, frozenset[str]]:
    """Every --gossip scheme's capabilities: "compressible" (--compress encodes its mix), "error-feedback" (it
    corrects what compression drops itself: CHOCO's public copies, γ = --consensus-step)."""
    from p2pfl.gossip.schemes import SCHEMES
    return {n: SCHEMES.get(n).capabilities for n in SCHEMES.names()}


def compressing_schemes() -> dict[str, str]:
    """The --gossip schemes whose mix --compress encodes, each as the message names it (one without its own error
    feedback compresses its plain gossip step)."""
    return {n: n if "error-feedback" in caps else f"{n} (no error feedback)"
            for n, caps in scheme_capabilities().items() if "compressible" in caps}


@method_options("codec: every compressor")
class CompressorOptions:
    """The option of every compressor: what it compresses as one vector."""

    compress_scope: str = opt("vector", "what --compress compresses as one vector: the whole mixed vector (vector) or "
                                        "each of the model's tensors on its own (tensor: its own k, norm and scale, as "
                                        "ChocoSGD does; docs/compression.md); moot with --compress none",
                              ("vector", "tensor"), section="compression")


class Compressor(Codec, Component):
    """A codec whose message is a few values and packed bits (see the module docstring)."""

    Options = CompressorOptions
    #: --compress-scope tensor: the mixed vector's segment sizes, each compressed on its own (None: vector scope).
    layout: tuple[int, ...] | None = None

    @classmethod
    def from_config(cls, cfg: Any) -> Compressor:
        """The codec a run's configuration asks for (its own options and the run's seed)."""
        raise NotImplementedError

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        """A compressor encodes the plain W-weighted gossip of a method and scheme that mix by it."""
        check(catalogue().get(cfg.algorithm, cfg).can(MIXES_BY_W), "compress",
              f"{cfg.algorithm} does not mix by the W-weighted gossip --compress encodes")
        schemes = compressing_schemes()
        check(cfg.gossip in schemes, "compress",
              f"compresses --gossip {' and '.join(schemes.values())}, got '{cfg.gossip}'")
        from p2pfl.byzantine import AGGREGATORS
        plain = "linear" in AGGREGATORS.get(cfg.aggregator).capabilities
        check(cfg.byzantine is None and plain and cfg.mixing != "server", "compress",
              "compresses the plain W-weighted mean: not with --byzantine, a robust --aggregator or --mixing server")

    def record(self, d: int) -> dict[str, Any]:
        """Its parameters as manifest["compression"] records them for a d-vector (p2pfl.gossip.compress.records)."""
        return {}

    def bind(self, cfg: Any, algorithm: Any) -> None:
        """--compress-scope tensor: compress each tensor of the method's mixed vector on its own (its layout, known
        once the method is set up); vector scope leaves the codec as built."""
        if cfg.compress_scope != "tensor":
            return
        mixed, layout = algorithm.mixed_vector(), algorithm.mixed_layout()
        assert mixed is not None and layout is not None, f"--compress: {cfg.algorithm} has no mixed vector"
        assert sum(layout) == mixed[0], f"{cfg.algorithm}: its mixed layout holds {sum(layout)} values, not {mixed[0]}"
        self.per_tensor(layout)

    def per_tensor(self, layout: Sequence[int]) -> None:
        """Compress each segment of `layout` (the mixed vector's tensor sizes, in order) on its own from now on
        (--compress-scope tensor); empty tensors carry nothing and are left out."""
        sizes = tuple(int(n) for n in layout if int(n) > 0)
        if not sizes:
            raise ValueError("--compress-scope tensor: the mixed vector has no tensor to compress")
        self.layout = sizes

    def segments(self, d: int) -> tuple[int, ...]:
        """The sizes of the segments a message of a d-vector compresses on its own: (d,) under vector scope."""
        if self.layout is None:
            return (d,)
        if sum(self.layout) != d:
            raise ValueError(f"--compress-scope tensor: a vector of {d} values, but the layout's tensors hold "
                             f"{sum(self.layout)}")
        return self.layout

    def encode(self, peer: int, vector: torch.Tensor, round: int) -> torch.Tensor:
        flat = vector.reshape(-1)
        sizes = self.segments(flat.numel())
        if len(sizes) == 1:
            values, bits = self.compress(peer, flat, round)
            return message.pack(flat.numel(), values, bits)
        values, packed = [], []
        for i, part in enumerate(flat.split(sizes)):
            with segment(i):
                v, b = self.compress(peer, part, round)
            assert v.numel() == self.values(part.numel()) and b.numel() == self.bits(part.numel()), \
                f"{self.name}: a segment of {part.numel()} values made a message of another size than it declares"
            values.append(v.reshape(-1))
            packed.append(b.reshape(-1).to(torch.uint8, copy=False))
        return message.pack(flat.numel(), torch.cat(values), torch.cat(packed))

    def decode(self, sender: int, payload: torch.Tensor, round: int) -> torch.Tensor:
        msg = message.unpack(payload, lambda d: sum(self.values(n) for n in self.segments(d)))
        sizes = self.segments(msg.d)
        if len(sizes) == 1:
            return self.expand(sender, msg, round)
        out, at_value, at_bit = [], 0, 0
        for i, n in enumerate(sizes):
            values, bits = self.values(n), self.bits(n)
            part = Message(n, msg.dtype, msg.values[at_value:at_value + values], msg.bits[at_bit:at_bit + bits])
            with segment(i):
                out.append(self.expand(sender, part, round))
            at_value, at_bit = at_value + values, at_bit + bits
        if at_bit != msg.bits.numel():
            raise ValueError(f"compressed gossip: a per-tensor message holds {at_bit} bytes of bits, got "
                             f"{msg.bits.numel()}")
        return torch.cat(out)

    def size(self, d: int, dtype: torch.dtype) -> int:
        """The exact bytes of the message of a d-vector of `dtype` (per segment under tensor scope)."""
        sizes = self.segments(d)
        return message.size(d, dtype, sum(self.values(n) for n in sizes), sum(self.bits(n) for n in sizes))

    def values(self, d: int) -> int:
        """How many numbers (in the vector's dtype) the message of a d-vector (or of a segment of d) holds."""
        raise NotImplementedError

    def bits(self, d: int) -> int:
        """How many bytes of packed bits the message of a d-vector (or of a segment of d) holds."""
        raise NotImplementedError

    def compress(self, peer: int, vector: torch.Tensor, round: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The values and packed bits `peer` sends for the flat `vector` in `round`."""
        raise NotImplementedError

    def expand(self, sender: int, msg: Message, round: int) -> torch.Tensor:
        """The dense vector `sender`'s message stands for."""
        raise NotImplementedError


class Sparse(Compressor):
    """A codec that sends k = ⌈ρ·d⌉ coordinates, ρ = --compress-ratio (top-k's option, read by random-k too)."""

    def __init__(self, ratio: float) -> None:
        self.ratio = ratio

    def k(self, d: int) -> int:
        """The coordinates a message of a d-vector keeps."""
        return kept(self.ratio, d)

    def values(self, d: int) -> int:
        return self.k(d)

    def record(self, d: int) -> dict[str, Any]:
        return {"ratio": self.ratio, "kept": sum(self.k(n) for n in self.segments(d))}
