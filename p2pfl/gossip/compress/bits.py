"""Bit packing: n unsigned integers of `width` bits each into ⌈n·width/8⌉ bytes and back, in torch (on the
integers' device). Bit j of integer i is bit (i·width + j) of the stream, least significant first in every byte,
so the packed size is exact: no integer is padded to a byte, only the stream's last byte is."""
from __future__ import annotations

import torch


def packed_size(n: int, width: int) -> int:
    """The bytes `pack` makes of n integers of `width` bits."""
    return (n * width + 7) // 8


def _work_dtype(width: int) -> torch.dtype:
    """The narrowest integer type the shifts can run in (uint8 keeps the temporaries of the codes small)."""
    return torch.uint8 if width <= 8 else torch.int64


def pack(codes: torch.Tensor, width: int) -> torch.Tensor:
    """The 1-D uint8 tensor holding `codes` (non-negative integers below 2**width) at `width` bits each."""
    dtype = _work_dtype(width)
    n = codes.numel()
    shifts = torch.arange(width, dtype=dtype, device=codes.device)
    bits = ((codes.reshape(-1, 1).to(dtype) >> shifts) & 1).to(torch.uint8).reshape(-1)
    bits = torch.cat([bits, bits.new_zeros(packed_size(n, width) * 8 - bits.numel())]).reshape(-1, 8)
    out = torch.zeros(bits.shape[0], dtype=torch.uint8, device=codes.device)
    for j in range(8):
        out |= bits[:, j] << j
    return out


def unpack(data: torch.Tensor, n: int, width: int) -> torch.Tensor:
    """The n integers `pack(codes, width)` made `data` of (int64 for widths over 8 bits, else uint8)."""
    if data.numel() != packed_size(n, width):
        raise ValueError(f"bit packing: {n} codes of {width} bits take {packed_size(n, width)} bytes, got "
                         f"{data.numel()}")
    dtype = _work_dtype(width)
    shifts = torch.arange(8, dtype=torch.uint8, device=data.device)
    bits = ((data.reshape(-1, 1) >> shifts) & 1).reshape(-1)[:n * width].reshape(n, width).to(dtype)
    codes = torch.zeros(n, dtype=dtype, device=data.device)
    for j in range(width):
        codes |= bits[:, j] << j
    return codes


def width_of(largest: int) -> int:
    """The bits an unsigned integer up to `largest` needs (at least one): ⌈log2(largest + 1)⌉."""
    return max(1, int(largest).bit_length())
