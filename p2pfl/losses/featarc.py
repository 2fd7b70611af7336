"""FeatARC's pieces (Dec-SSL paper, Algorithms 1-2; reference notes §B.7): the feature-alignment regulariser of
the local loss, and the alignment scores that assign a peer to a cluster model.

Every similarity is a cosine (rows are L2-normalised): the paper uses the cosine distance D(a, b) = −cos(a, b)
for the SSL loss, the auxiliary loss and the cluster identification alike.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from ._util import unit_rows


def alignment_regulariser(z1: torch.Tensor, z2: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
    """−½ (mean_b cos(z1_b, F_b) + mean_b cos(z2_b, F_b)): the projections z1, z2 (B, d) of a batch's two views
    pulled towards F = `anchor` (B, d), the frozen cluster model's backbone features of the un-augmented images.

    The anchor is a constant (detached); its width must equal the projections' (FeatARC builds the projection
    head with the encoder's feature width)."""
    if z1.shape != z2.shape or z1.dim() != 2:
        raise ValueError(f"alignment_regulariser: z1 and z2 must both be (B, d), got {tuple(z1.shape)} and "
                         f"{tuple(z2.shape)}")
    if anchor.shape != z1.shape:
        raise ValueError(f"alignment_regulariser: the anchor must have the projections' shape {tuple(z1.shape)}, "
                         f"got {tuple(anchor.shape)} (projection width must equal the feature width)")
    f = unit_rows(anchor.detach().to(dtype=z1.dtype))
    a1 = (unit_rows(z1) * f).sum(dim=1).mean()
    a2 = (unit_rows(z2) * f).sum(dim=1).mean()
    return -0.5 * (a1 + a2)


def alignment_scores(own: torch.Tensor, clusters: Sequence[torch.Tensor]) -> list[float]:
    """a_k = mean_x cos(F_k(x), F_i(x)) for each cluster k: `own` (N, d) the peer's features of its images,
    `clusters[k]` (N, d) cluster k's features of the same images. Summed in float64 (the argmax should not hinge
    on float32 rounding of the mean)."""
    f = unit_rows(own.detach().double())
    out = []
    for k, other in enumerate(clusters):
        if other.shape != own.shape:
            raise ValueError(f"alignment_scores: cluster {k}'s features have shape {tuple(other.shape)}, "
                             f"the peer's {tuple(own.shape)}")
        out.append(float((unit_rows(other.detach().double()) * f).sum(dim=1).mean()))
    return out


def assign_cluster(scores: Sequence[float]) -> int:
    """argmax_k scores[k], the lowest k on ties (and NaN scores never win)."""
    if not scores:
        raise ValueError("assign_cluster: no cluster scores")
    best = 0
    for k, s in enumerate(scores):
        if s > scores[best] or (scores[best] != scores[best] and s == s):
            best = k
    return best
