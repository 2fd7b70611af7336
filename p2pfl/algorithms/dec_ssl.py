"""Dec-SSL (SPEC §4, seed 001): SimCLR encoders trained on unlabeled shards, mixed by gossip."""
from __future__ import annotations

import torch
from torch import nn

from p2pfl.algorithms.gossip_learner import GossipLearner, GossipPeer
from p2pfl.algorithms.scoring import representation_scores
from p2pfl.data import SimCLRAugment
from p2pfl.losses import nt_xent
from p2pfl.models import SimCLRNet, build_encoder


class DecSSL(GossipLearner):
    """SimCLR: two batched augmented views per image, NT-Xent, E local epochs, then one gossip step."""

    name = "dec-ssl"

    def setup(self) -> None:
        super().setup()
        ds = self.dataset
        self.augment = SimCLRAugment(self.work.image_size, self.work.channels, ds.mean, ds.std)

    def make_model(self) -> nn.Module:
        encoder = build_encoder(self.cfg.model, self.work.channels, self.work.image_size)
        return SimCLRNet(encoder, proj_dim=self.cfg.proj_dim)

    def batch_loss(self, peer: GossipPeer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        gen = peer.augment_rng
        views = torch.cat([self.augment(x, gen), self.augment(x, gen)])
        _, z = peer.model(views)
        z1, z2 = z.chunk(2)
        return nt_xent(z1, z2, temperature=self.cfg.temperature)

    def score(self, model: nn.Module, peer: int | None, final: bool) -> dict[str, float]:
        return representation_scores(self, model, peer, final)
