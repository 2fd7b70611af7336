"""The Gramian (GRAM) contrastive loss of Cicchetti et al. 2025, as a FedMuscle baseline (SPEC §6, notes §C.3)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ._util import Others, check_temperature, stack_others, unit_rows

#: GRAM learns its temperature and initialises it at 0.07; we use that value as a fixed default.
GRAM_DEFAULT_TAU = 0.07


def gram_volumes(anchor: torch.Tensor, others: torch.Tensor) -> torch.Tensor:
    """Volumes V[i, j] = sqrt(det G_ij), G_ij the Gram matrix of [anchor_i, others[0]_j, ..., others[M-1]_j].

    ``anchor`` (B, d) and ``others`` (M, B, d) must already have unit rows. The volume is 0 when the M + 1
    vectors are linearly dependent (e.g. all equal) and 1 when they are orthonormal.
    """
    b = anchor.shape[0]
    m = others.shape[0]
    g_oo = torch.einsum("mjd,njd->jmn", others, others)  # (B_j, M, M), independent of the anchor
    g_ao = torch.einsum("id,mjd->ijm", anchor, others)  # (B_i, B_j, M)
    diag = (anchor * anchor).sum(-1)  # (B_i,), 1 for unit rows
    gram = anchor.new_empty(b, b, m + 1, m + 1)
    gram[:, :, 0, 0] = diag[:, None]
    gram[:, :, 0, 1:] = g_ao
    gram[:, :, 1:, 0] = g_ao
    gram[:, :, 1:, 1:] = g_oo.unsqueeze(0)
    det = torch.linalg.det(gram)
    # det >= 0 in exact arithmetic; rounding can make it slightly negative, and sqrt has an infinite slope at 0.
    tiny = torch.finfo(det.dtype).eps ** 2
    return torch.sqrt(det.clamp_min(0.0) + tiny)


def gram_loss(
    anchor: torch.Tensor, others: Others, tau: float = GRAM_DEFAULT_TAU, label_smoothing: float = 0.0
) -> torch.Tensor:
    """GRAM baseline: cross-entropy over the B same-sample tuples with score -Vol/tau.

    For anchor i the candidates are the B tuples (others[0]_j, ..., others[M-1]_j), j = 1..B, each scored
    ``-sqrt(det G_ij)/tau`` (small volume = well aligned); the positive is j = i. Rows are L2-normalised
    inside; ``others`` (list of M (B, d) or one (M, B, d)) are constants. Only the anchor side of GRAM's
    symmetric loss is used, since only the anchor is trainable here. ``tau`` defaults to GRAM's initial
    (learnable there) temperature 0.07; ``label_smoothing`` = 0.1 matches GRAM's training code.
    """
    t = check_temperature("tau", tau)
    z = stack_others(others, anchor, what="gram_loss others")
    a = unit_rows(anchor)
    logits = -gram_volumes(a, z) / t
    target = torch.arange(a.shape[0], device=a.device)
    return F.cross_entropy(logits, target, label_smoothing=label_smoothing)
