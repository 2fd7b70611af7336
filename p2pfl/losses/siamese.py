"""Losses of the non-contrastive Dec-SSL objectives (SPEC §4): SimSiam's and BYOL's symmetric
prediction losses, each with its stop-gradient on the side that is predicted."""
from __future__ import annotations

import torch

from ._util import unit_rows


def _check_pairs(what: str, *tensors: torch.Tensor) -> None:
    shape = tensors[0].shape
    if len(shape) != 2 or any(t.shape != shape for t in tensors):
        raise ValueError(f"{what}: every input must be the same (B, d), got {[tuple(t.shape) for t in tensors]}")


def neg_cosine(p: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """D(p, z) = -mean_b cos(p_b, sg(z_b)): the negative cosine of SimSiam, z a constant (stop-gradient)."""
    return -(unit_rows(p) * unit_rows(z.detach())).sum(dim=-1).mean()


def simsiam_loss(p1: torch.Tensor, p2: torch.Tensor, z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
    """SimSiam's symmetric loss D(p1, sg(z2))/2 + D(p2, sg(z1))/2 with D = -cosine averaged over the batch.

    p_i is the predictor output and z_i the projector output of view i, each (B, d). D is the negative cosine
    of the SimSiam paper and SPEC §4, so the loss lies in [-1, 1] (-1 at perfect agreement); the Dec-SSL code
    writes D = 1 - cos, which shifts the value by +1 and has exactly the same gradients. z1 and z2 get no
    gradient from this loss (stop-gradient): the projector learns only through the predictor's inputs.
    """
    _check_pairs("simsiam_loss", p1, p2, z1, z2)
    return 0.5 * neg_cosine(p1, z2) + 0.5 * neg_cosine(p2, z1)


def byol_loss(p1: torch.Tensor, p2: torch.Tensor, t1: torch.Tensor, t2: torch.Tensor) -> torch.Tensor:
    """BYOL's symmetrised loss: mean_b [2 - 2 cos(p1_b, sg(t2_b))] + mean_b [2 - 2 cos(p2_b, sg(t1_b))].

    p_i is the online network's prediction of view i, t_i the target network's projection of view i, each
    (B, d). As in the BYOL paper the two directions are summed (L + L~), so the loss lies in [0, 8]; the
    target side is a constant (stop-gradient; the target network is also run without gradients).
    """
    _check_pairs("byol_loss", p1, p2, t1, t2)
    one = 2.0 - 2.0 * (unit_rows(p1) * unit_rows(t2.detach())).sum(dim=-1)
    two = 2.0 - 2.0 * (unit_rows(p2) * unit_rows(t1.detach())).sum(dim=-1)
    return one.mean() + two.mean()


def output_std(z: torch.Tensor) -> torch.Tensor:
    """Mean over dimensions of the per-dimension std of the L2-normalised outputs (SimSiam's collapse
    monitor): about 1/sqrt(d) for well spread outputs, 0 when they collapse to one vector."""
    return unit_rows(z.detach()).std(dim=0).mean()
