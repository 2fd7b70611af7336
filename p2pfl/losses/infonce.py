"""InfoNCE and the pairwise-InfoNCE baseline of FedMuscle (SPEC §6, reference notes §C.4)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ._util import Others, check_temperature, stack_others, unit_rows


def infonce(anchor: torch.Tensor, other: torch.Tensor, tau: float = 0.2) -> torch.Tensor:
    """One-directional InfoNCE: anchor row i against all rows of ``other``, positive on the diagonal.

    ``-(1/B) Σ_i log(e^{s(a_i, o_i)/tau} / Σ_j e^{s(a_i, o_j)/tau})`` with s the cosine similarity (rows are
    L2-normalised inside). Gradients flow into whichever inputs require them.
    """
    t = check_temperature("tau", tau)
    if anchor.dim() != 2 or other.shape != anchor.shape:
        raise ValueError(f"infonce: anchor and other must both be (B, d), "
                         f"got {tuple(anchor.shape)}, {tuple(other.shape)}")
    logits = unit_rows(anchor) @ unit_rows(other).t() / t
    target = torch.arange(anchor.shape[0], device=anchor.device)
    return F.cross_entropy(logits, target)


def pairwise_infonce(anchor: torch.Tensor, others: Others, tau: float = 0.2) -> torch.Tensor:
    """Σ_m InfoNCE(anchor, others[m]; tau): the pairwise baseline on the FedMuscle exchange.

    ``others`` (a list of M (B, d) tensors or one (M, B, d) tensor) are received representations and are
    treated as constants. Equals ``muscle_loss`` with gamma = 0.
    """
    t = check_temperature("tau", tau)
    z = stack_others(others, anchor, what="pairwise_infonce others")
    a = unit_rows(anchor)
    logits = torch.einsum("id,mjd->mij", a, z) / t  # (M, B, B)
    m, b, _ = logits.shape
    target = torch.arange(b, device=anchor.device).repeat(m)
    return F.cross_entropy(logits.reshape(m * b, b), target) * m
