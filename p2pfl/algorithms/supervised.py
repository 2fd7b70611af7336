"""Supervised baselines of Dec-SSL (SPEC §4): Dec-SL (gossip-mixed) and local (no communication).

Dec-SL is scored by its own test accuracy and, like Dec-SSL, by a linear probe on its encoder (Dec-SLRep).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from p2pfl.algorithms.gossip_learner import GossipLearner, GossipPeer
from p2pfl.algorithms.scoring import (
    classifier_scores,
    classifier_scores_stacked,
    representation_scores,
    representation_scores_stacked,
)
from p2pfl.capabilities import FEATURES, MIXES_BY_W, PER_SAMPLE
from p2pfl.data import supervised_apply, supervised_draw
from p2pfl.heterogeneity import Loss
from p2pfl.method import ASYNCHRONOUS, BATCHABLE
from p2pfl.models import SupervisedNet, build_encoder
from p2pfl.models.stacked import PeerStack

if TYPE_CHECKING:
    from p2pfl.config import RunConfig
    from p2pfl.method import Algorithm


class DecSL(GossipLearner):
    """The Dec-SSL backbone with a linear head, trained with labels and mixed by gossip."""

    scores_representations = True
    name = "dec-sl"
    # feature vectors: no crop or flip (--sl-augment crop-flip); per-sample gradients (DP-SGD): a cross-entropy
    capabilities = frozenset({BATCHABLE, FEATURES, PER_SAMPLE})

    def setup(self) -> None:
        super().setup()
        if self.dataset.features and self.cfg.sl_augment == "simclr":
            raise ValueError(f"--sl-augment simclr: its views are of images; --dataset {self.cfg.dataset} gives "
                             "feature vectors (use crop-flip, which leaves them as they are)")
        self.augment = self.simclr_augment() if self.cfg.sl_augment == "simclr" else None

    def make_model(self) -> nn.Module:
        encoder = build_encoder(self.cfg.model, self.work.channels, self.work.image_size, cfg=self.cfg)
        return SupervisedNet(encoder, self.dataset.num_classes)

    def augmentation(self) -> str | None:
        """--sl-augment's: crop+flip, or SimCLR's views."""
        return super().augmentation() if self.augment is not None else self.crop_flip()

    def draw(self, peer: GossipPeer, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Crop+flip (--sl-augment crop-flip), or one SimCLR view (simclr: the Dec-SSL code's SL training)."""
        if self.augment is not None:
            return self.augment.draw(x, peer.augment_rng)
        return supervised_draw(x, peer.augment_rng)

    def apply(self, x: torch.Tensor, draws: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.augment is not None:
            return self.augment.apply(x, draws)
        ds = self.dataset
        return supervised_apply(x, draws, ds.mean, ds.std, flip_p=ds.transform.flip_p, fill=ds.transform.fill)

    def criterion(self, out: torch.Tensor, y: torch.Tensor, refs: list) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return F.cross_entropy(out, y), {}

    def zeta2_loss(self) -> Loss:
        """Cross-entropy of the classifier (ζ², p2pfl.heterogeneity)."""
        return lambda model, x, y: F.cross_entropy(model(x), y)

    def score(self, model: nn.Module, peer: int | None, final: bool) -> dict[str, float]:
        return {**classifier_scores(self, model), **representation_scores(self, model, peer, final)}

    def score_stacked(self, stacked: nn.Module, stack: PeerStack, peers: list[int], final: bool
                      ) -> list[dict[str, float]]:
        acc = classifier_scores_stacked(self, stacked, stack, peers)
        rep = representation_scores_stacked(self, stacked, stack, peers, final)
        return [{**a, **r} for a, r in zip(acc, rep)]


class Local(DecSL):
    """Each peer trains alone on its shard: no communication at all."""

    name = "local"
    communicates = False
    lacks = {ASYNCHRONOUS: "its peers never communicate", MIXES_BY_W: "its peers never communicate"}

    @classmethod
    def runs(cls, cfg: RunConfig) -> type[Algorithm]:
        """With --peers-spec every peer has its own model and task and trains alone on it: FedMuscle's peers
        without their alignment phase (its Δ% baseline)."""
        if cfg.peers_spec is None:
            return cls
        from p2pfl.algorithms import get
        return get("fedmuscle").trained_alone()
