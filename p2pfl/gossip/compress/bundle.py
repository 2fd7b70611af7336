"""What a lagging CHOCO link carries (p2pfl.gossip.schemes.choco): the messages its receiver missed, replayed, or the
sender's whole public copy when replaying would cost more. One uint8 tensor:

    replay: int64 [n, round_1, bytes_1, ..., round_n, bytes_n], then the n messages (oldest first)
    reset:  int64 [0], then the public copy's raw values (its own dtype)

The rounds travel because a message is decoded with its round's stream (random-k's coordinates)."""
from __future__ import annotations

from collections.abc import Sequence

import torch

RESET = 0


def replay(messages: Sequence[tuple[int, torch.Tensor]]) -> torch.Tensor:
    """The bundle of `messages`, (round, payload) oldest first."""
    header = [len(messages)] + [x for r, m in messages for x in (r, m.numel())]
    device = messages[0][1].device
    return torch.cat([torch.tensor(header, dtype=torch.int64, device=device).view(torch.uint8),
                      *(m for _, m in messages)])


def reset(copy: torch.Tensor) -> torch.Tensor:
    """The bundle that sets the receiver's copy to `copy`."""
    head = torch.tensor([RESET], dtype=torch.int64, device=copy.device).view(torch.uint8)
    return torch.cat([head, copy.reshape(-1).contiguous().view(torch.uint8)])


def size(messages: Sequence[int]) -> int:
    """The bytes of a replay of messages of these sizes."""
    return 8 * (1 + 2 * len(messages)) + sum(messages)


def reset_size(d: int, dtype: torch.dtype) -> int:
    """The bytes of a reset of a d-vector of `dtype`."""
    return 8 + d * torch.empty((), dtype=dtype).element_size()


def _int64(data: torch.Tensor) -> list[int]:
    return data.clone().view(torch.int64).tolist()


def open_(bundle: torch.Tensor, like: torch.Tensor) -> torch.Tensor | list[tuple[int, torch.Tensor]]:
    """What `bundle` holds: the new copy (a reset, shaped and typed as `like`) or the (round, payload) messages."""
    n = _int64(bundle[:8])[0]
    if n == RESET:
        return bundle[8:].clone().view(like.dtype).reshape(like.shape)
    header = _int64(bundle[8:8 * (1 + 2 * n)])
    out, at = [], 8 * (1 + 2 * n)
    for r, length in zip(header[::2], header[1::2]):
        out.append((r, bundle[at:at + length]))
        at += length
    return out
