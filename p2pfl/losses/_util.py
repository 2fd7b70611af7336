"""Small helpers shared by the loss modules."""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

Others = torch.Tensor | Sequence[torch.Tensor]


def unit_rows(x: torch.Tensor) -> torch.Tensor:
    """L2-normalise the last dimension (cosine similarity becomes a dot product)."""
    return F.normalize(x, dim=-1)


def stack_others(others: Others, anchor: torch.Tensor, *, what: str = "others") -> torch.Tensor:
    """Return the received representations as one detached, row-normalised (M, B, d) tensor.

    ``others`` is a list of M tensors (B, d) or one tensor (M, B, d); a single (B, d) tensor is read as
    M = 1. They are constants for the peer that owns ``anchor``, hence the detach.
    """
    if isinstance(others, torch.Tensor):
        z = others.unsqueeze(0) if others.dim() == 2 else others
    else:
        others = list(others)
        if len(others) == 0:
            raise ValueError(f"{what}: at least one other representation matrix is required (got M = 0)")
        z = torch.stack([o for o in others], dim=0)
    if z.dim() != 3:
        raise ValueError(f"{what}: expected a list of (B, d) tensors or one (M, B, d) tensor, "
                         f"got shape {tuple(z.shape)}")
    if z.shape[0] == 0:
        raise ValueError(f"{what}: at least one other representation matrix is required (got M = 0)")
    if anchor.dim() != 2 or z.shape[1:] != anchor.shape:
        raise ValueError(
            f"{what}: every matrix must have the anchor's shape {tuple(anchor.shape)}, got {tuple(z.shape[1:])}"
        )
    return unit_rows(z.detach().to(device=anchor.device, dtype=anchor.dtype))


def check_temperature(name: str, value: float) -> float:
    """Temperatures must be positive finite numbers."""
    v = float(value)
    if not (v > 0.0 and v != float("inf")):
        raise ValueError(f"{name} must be a positive finite temperature, got {value!r}")
    return v
