"""SimCLR's NT-Xent loss (Dec-SSL, SPEC §4)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ._util import check_temperature, unit_rows


def nt_xent(z1: torch.Tensor, z2: torch.Tensor, temperature: float = 0.5) -> torch.Tensor:
    """Normalised-temperature cross-entropy over the 2B views of a batch.

    ``z1[k]`` and ``z2[k]`` are projections of two augmentations of image k. Each of the 2B views is an
    anchor; its positive is the other view of the same image, and the denominator holds the 2B - 1 other
    views (positive included, the anchor itself excluded). Rows are L2-normalised, so similarities are
    cosines. Returns the mean over the 2B anchors.
    """
    t = check_temperature("temperature", temperature)
    if z1.shape != z2.shape or z1.dim() != 2:
        raise ValueError(f"nt_xent: z1 and z2 must both be (B, d), got {tuple(z1.shape)} and {tuple(z2.shape)}")
    b = z1.shape[0]
    z = unit_rows(torch.cat([z1, z2], dim=0))
    logits = (z @ z.t()) / t
    self_mask = torch.eye(2 * b, dtype=torch.bool, device=z.device)
    logits = logits.masked_fill(self_mask, float("-inf"))
    target = torch.cat([torch.arange(b, 2 * b), torch.arange(0, b)]).to(z.device)
    return F.cross_entropy(logits, target)
