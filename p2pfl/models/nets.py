"""Composite networks used by the algorithms: SimCLR (Dec-SSL), supervised (Dec-SL / FedAvg baselines),
MOON's ModelFedCon, and FedMuscle's representation model with a task head."""
from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from .base import Encoder
from .heads import LinearClassifier, MoonHead, ProjectionHead


class SimCLRNet(nn.Module):
    """Encoder f + projection g (``ProjectionHead``); forward returns (h, z) = (f(x), g(f(x))), z un-normalised."""

    peer_stackable = True  # forward acts per channel (p2pfl.models.stacked)

    def __init__(self, encoder: Encoder, proj_dim: int = 128, hidden_dim: int | None = None) -> None:
        super().__init__()
        self.encoder = encoder
        self.projector = ProjectionHead(encoder.feat_dim, proj_dim, hidden_dim)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Encoder features h (what the linear probe sees)."""
        return self.encoder(x)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.encoder(x)
        return h, self.projector(h)


class SupervisedNet(nn.Module):
    """Encoder + linear classifier; forward returns logits, ``features(x)`` the encoder output."""

    peer_stackable = True  # forward acts per channel (p2pfl.models.stacked)

    def __init__(self, encoder: Encoder, num_classes: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.classifier = LinearClassifier(encoder.feat_dim, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Encoder features h."""
        return self.encoder(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.encoder(x))


class MoonNet(nn.Module):
    """MOON's ModelFedCon: h = encoder(x), z = MoonHead(h), logits = Linear(proj_dim, num_classes)(z).

    The classifier consumes the projection output z (not h). forward returns (h, z, logits). Without a projection
    (proj_dim None) z is h: the encoder and one Linear classifier, a model trained as given.
    """

    peer_stackable = True  # forward acts per channel (p2pfl.models.stacked)

    def __init__(self, encoder: Encoder, num_classes: int, proj_dim: int | None = 256) -> None:
        """`proj_dim` None: no projection head (z = h), the classifier on the encoder's features (--head linear)."""
        super().__init__()
        self.encoder = encoder
        self.head = nn.Identity() if proj_dim is None else MoonHead(encoder.feat_dim, proj_dim)
        self.classifier = nn.Linear(encoder.feat_dim if proj_dim is None else proj_dim, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Encoder features h."""
        return self.encoder(x)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.encoder(x)
        z = self.head(h)
        return h, z, self.classifier(z)


class RepresentationNet(nn.Module):
    """FedMuscle peer model: representation model h_n = projection(encoder(x)) ∈ R^rep_dim, and a task head
    on the encoder features.

    ``represent(x)`` returns the un-normalised representation (B, rep_dim); ``forward(x)`` the task output.
    ``representation_parameters()`` (encoder + projection) and ``head_parameters()`` (task head) are disjoint
    and together cover the model, so the contrastive phase can optimise the former only. With
    ``trainable_only=True`` frozen tensors (e.g. a LoRA backbone) are skipped.
    """

    def __init__(self, encoder: Encoder, rep_dim: int, head: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.projection = nn.Linear(encoder.feat_dim, rep_dim)
        self.head = head
        self.rep_dim = int(rep_dim)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Encoder features (input of both the projection and the task head)."""
        return self.encoder(x)

    def represent(self, x: torch.Tensor) -> torch.Tensor:
        """Un-normalised representation (B, rep_dim)."""
        return self.projection(self.encoder(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))

    def representation_parameters(self, trainable_only: bool = False) -> Iterator[nn.Parameter]:
        """Parameters of the representation model (encoder + projection)."""
        for mod in (self.encoder, self.projection):
            for p in mod.parameters():
                if p.requires_grad or not trainable_only:
                    yield p

    def head_parameters(self, trainable_only: bool = False) -> Iterator[nn.Parameter]:
        """Parameters of the task head."""
        for p in self.head.parameters():
            if p.requires_grad or not trainable_only:
                yield p
