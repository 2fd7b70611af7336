"""What a compressed message is on the wire: one uint8 tensor (the transport carries it as any payload and counts
its bytes) laid out as

    header: int64 [d, dtype code]   (16 bytes: the dense vector's length and value type)
    values: n numbers in the vector's own dtype (the kept coordinates, or a norm / scale)
    bits:   packed codes (p2pfl.gossip.compress.bits: indices, signs and levels)

The header comes first and is 16 bytes, so the values start aligned for every floating dtype. How many values and
bits a message holds follows from d and the codec's parameters, so nothing else travels."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
HEADER_BYTES = 16


@dataclass(frozen=True)
class Message:
    """A decoded message: the dense length `d`, the value type, the values and the packed bits."""

    d: int
    dtype: torch.dtype
    values: torch.Tensor
    bits: torch.Tensor


def size(d: int, dtype: torch.dtype, values: int, bits: int) -> int:
    """The bytes of a message of `values` numbers of `dtype` and `bits` packed bytes (d is in the header)."""
    return HEADER_BYTES + values * torch.empty((), dtype=dtype).element_size() + bits


def pack(d: int, values: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """The one uint8 payload of a message (values in their own dtype, which the header records)."""
    if values.dtype not in DTYPES:
        raise ValueError(f"compressed gossip: vectors of {DTYPES}, got {values.dtype}")
    header = torch.tensor([d, DTYPES.index(values.dtype)], dtype=torch.int64, device=values.device)
    parts = (header, values.reshape(-1).contiguous(), bits.reshape(-1).to(torch.uint8, copy=False))
    return torch.cat([p.view(torch.uint8) for p in parts])


def _view(data: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`data`'s bytes as `dtype` (copied first when the buffer does not start at a multiple of its size)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    if data.storage_offset() % itemsize:
        data = data.clone()
    return data.view(dtype)


def unpack(payload: torch.Tensor, count: Callable[[int], int]) -> Message:
    """The message in `payload`; `count(d)` is how many numbers a message of a d-vector holds."""
    if payload.dtype != torch.uint8 or payload.dim() != 1 or payload.numel() < HEADER_BYTES:
        raise ValueError(f"compressed gossip: a message is a 1-D uint8 tensor of at least {HEADER_BYTES} bytes, got "
                         f"{tuple(payload.shape)} {payload.dtype}")
    d, code = (int(x) for x in _view(payload[:HEADER_BYTES], torch.int64).tolist())
    dtype = DTYPES[code]
    end = HEADER_BYTES + count(d) * torch.empty((), dtype=dtype).element_size()
    return Message(d, dtype, _view(payload[HEADER_BYTES:end], dtype), payload[end:])

