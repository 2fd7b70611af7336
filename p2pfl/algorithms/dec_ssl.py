"""Dec-SSL (SPEC §4, seed 001): SimCLR encoders trained on unlabeled shards, mixed by gossip."""
from __future__ import annotations

import torch
from torch import nn

from p2pfl.algorithms.gossip_learner import GossipLearner, GossipPeer
from p2pfl.algorithms.scoring import representation_scores, representation_scores_stacked
from p2pfl.data import SimCLRAugment
from p2pfl.losses import nt_xent
from p2pfl.models import SimCLRNet, build_encoder
from p2pfl.models.stacked import PeerStack


class DecSSL(GossipLearner):
    """SimCLR: two batched augmented views per image, NT-Xent, E local epochs, then one gossip step."""

    name = "dec-ssl"
    batchable = True

    def setup(self) -> None:
        super().setup()
        ds = self.dataset
        self.augment = SimCLRAugment(self.work.image_size, self.work.channels, ds.mean, ds.std)

    def make_model(self) -> nn.Module:
        encoder = build_encoder(self.cfg.model, self.work.channels, self.work.image_size)
        return SimCLRNet(encoder, proj_dim=self.cfg.proj_dim)

    def draw(self, peer: GossipPeer, x: torch.Tensor) -> tuple[dict, dict]:
        return self.augment.draw(x, peer.augment_rng), self.augment.draw(x, peer.augment_rng)

    def apply(self, x: torch.Tensor, draws: tuple[dict, dict]) -> torch.Tensor:
        return torch.cat([self.augment.apply(x, d) for d in draws])

    def criterion(self, out: tuple[torch.Tensor, torch.Tensor], y: torch.Tensor, refs: list
                  ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        z1, z2 = out[1].chunk(2)
        return nt_xent(z1, z2, temperature=self.cfg.temperature), {}

    def score(self, model: nn.Module, peer: int | None, final: bool) -> dict[str, float]:
        return representation_scores(self, model, peer, final)

    def score_stacked(self, stacked: nn.Module, stack: PeerStack, peers: list[int], final: bool
                      ) -> list[dict[str, float]]:
        return representation_scores_stacked(self, stacked, stack, peers, final)
