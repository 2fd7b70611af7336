"""Supervised baselines of Dec-SSL (SPEC §4): Dec-SL (gossip-mixed) and local (no communication).

Dec-SL is scored by its own test accuracy and, like Dec-SSL, by a linear probe on its encoder (Dec-SLRep).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from p2pfl.algorithms.gossip_learner import GossipLearner, GossipPeer
from p2pfl.algorithms.scoring import classifier_scores, representation_scores
from p2pfl.data import supervised_augment
from p2pfl.models import SupervisedNet, build_encoder


class DecSL(GossipLearner):
    """The Dec-SSL backbone with a linear head, trained with labels and mixed by gossip."""

    name = "dec-sl"

    def make_model(self) -> nn.Module:
        encoder = build_encoder(self.cfg.model, self.work.channels, self.work.image_size)
        return SupervisedNet(encoder, self.dataset.num_classes)

    def batch_loss(self, peer: GossipPeer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        ds = self.dataset
        return F.cross_entropy(peer.model(supervised_augment(x, peer.augment_rng, ds.mean, ds.std)), y)

    def score(self, model: nn.Module, peer: int | None, final: bool) -> dict[str, float]:
        return {**classifier_scores(self, model), **representation_scores(self, model, peer, final)}


class Local(DecSL):
    """Each peer trains alone on its shard: no communication at all."""

    name = "local"
    communicates = False
