"""Siamese networks of the non-contrastive Dec-SSL objectives (SPEC §4): SimSiam and BYOL.

Both run each augmented view as its own batch, as the SimSiam and BYOL codes do, so that BatchNorm statistics
are those of one view: `forward` takes the views stacked view after view (what the methods' `apply` produces,
``views`` of them) and returns the outputs in the same order. `features(x)` is the encoder output, what the
linear probe and the kNN monitor read.

Widths scale with the encoder's feature width f (512 on ResNet-18) and the output width d (--proj-dim):
- SimSiam (algorithms.md §B.2): projector Linear(f, H)-BN-ReLU-Linear(H, H)-BN-ReLU-Linear(H, d)-BN(no affine)
  with H = max(d, 4f) (the Dec-SSL code's 512 -> 2048), linears before a BatchNorm without bias; predictor the
  bottleneck Linear(d, h)-BN-ReLU-Linear(h, d) with h = max(1, d // 4) (the SimSiam paper's 2048 -> 512 -> 2048;
  the Dec-SSL code uses h = d).
- BYOL (standard BYOL, not in the Dec-SSL code): projector and predictor both Linear-BN-ReLU-Linear
  (`ProjectionHead`), f -> H -> d and d -> H -> d with H = max(d, 2f) (the paper's 2048 -> 4096 -> 256).
"""
from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn

from .base import Encoder
from .heads import ProjectionHead


def per_view(fn: Callable[[torch.Tensor], torch.Tensor | tuple[torch.Tensor, ...]], x: torch.Tensor, views: int
             ) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """fn applied to each of the `views` equal slices of x's batch on its own, outputs concatenated in order."""
    if views < 1 or x.shape[0] % views:
        raise ValueError(f"a batch of {x.shape[0]} inputs does not split into {views} views")
    outs = [fn(v) for v in x.chunk(views)] if views > 1 else [fn(x)]
    if isinstance(outs[0], tuple):
        return tuple(torch.cat(parts) for parts in zip(*outs))
    return torch.cat(outs)


class SimSiamProjector(nn.Module):
    """SimSiam's 3-layer projection MLP; its last BatchNorm has no affine parameters."""

    def __init__(self, in_dim: int, hidden_dim: int, out_dim: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden_dim, bias=False), nn.BatchNorm1d(hidden_dim), nn.ReLU(inplace=True),
            nn.Linear(hidden_dim, hidden_dim, bias=False), nn.BatchNorm1d(hidden_dim), nn.ReLU(inplace=True),
            nn.Linear(hidden_dim, out_dim, bias=False), nn.BatchNorm1d(out_dim, affine=False),
        )

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.net(h)


class SimSiamPredictor(nn.Module):
    """SimSiam's bottleneck prediction MLP: Linear(d, h)-BN-ReLU-Linear(h, d)."""

    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden_dim, bias=False), nn.BatchNorm1d(hidden_dim),
                                 nn.ReLU(inplace=True), nn.Linear(hidden_dim, dim))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


class _Predicting(nn.Module):
    """Encoder, projector and predictor (set by the subclass): forward returns (z, p) with each view of the
    stacked input run as its own batch; `features` is what the linear probe sees."""

    encoder: Encoder
    projector: nn.Module
    predictor: nn.Module
    views: int

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Encoder features h."""
        return self.encoder(x)

    def _one_view(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.projector(self.encoder(x))
        return z, self.predictor(z)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return per_view(self._one_view, x, self.views)


class SimSiamNet(_Predicting):
    """Encoder + SimSiam projector + predictor; forward returns (z, p) per view, views stacked in order."""

    def __init__(self, encoder: Encoder, proj_dim: int = 2048, pred_hidden: int | None = None,
                 hidden_dim: int | None = None, views: int = 2) -> None:
        super().__init__()
        self.encoder = encoder
        self.views = int(views)
        hidden = int(hidden_dim or max(proj_dim, 4 * encoder.feat_dim))
        self.projector = SimSiamProjector(encoder.feat_dim, hidden, proj_dim)
        self.predictor = SimSiamPredictor(proj_dim, int(pred_hidden or max(1, proj_dim // 4)))


class SiameseTarget(nn.Module):
    """BYOL's target network: encoder + projector without gradients; forward returns z per view."""

    def __init__(self, encoder: nn.Module, projector: nn.Module, views: int = 2) -> None:
        super().__init__()
        self.encoder = encoder
        self.projector = projector
        self.views = int(views)
        self.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return per_view(lambda v: self.projector(self.encoder(v)), x, self.views)


class BYOLNet(_Predicting):
    """BYOL's online network: encoder + projector + predictor; forward returns (z, p) per view, views stacked."""

    def __init__(self, encoder: Encoder, proj_dim: int = 256, hidden_dim: int | None = None, views: int = 2) -> None:
        super().__init__()
        self.encoder = encoder
        self.views = int(views)
        hidden = int(hidden_dim or max(proj_dim, 2 * encoder.feat_dim))
        self.projector = ProjectionHead(encoder.feat_dim, proj_dim, hidden)
        self.predictor = ProjectionHead(proj_dim, proj_dim, hidden)

    def target(self) -> SiameseTarget:
        """A target network equal to this network's current encoder + projector (a copy, same shapes and
        parameter names, on the same device), in train mode (BatchNorm on batch statistics, as BYOL)."""
        return SiameseTarget(copy.deepcopy(self.encoder), copy.deepcopy(self.projector), self.views).train()


@torch.no_grad()
def follow_(target: nn.Module, online: nn.Module, tau: float) -> None:
    """EMA of the online parameters into the target's, in place: xi <- tau * xi + (1 - tau) * theta, for every
    parameter of `target` and the online parameter of the same name. Buffers (BatchNorm running statistics)
    are not averaged: the target runs on batch statistics and keeps its own."""
    params = dict(online.named_parameters())
    for name, xi in target.named_parameters():
        xi.mul_(tau).add_(params[name].detach(), alpha=1.0 - tau)
