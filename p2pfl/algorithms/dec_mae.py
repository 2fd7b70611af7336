"""Dec-SSL with the MAE objective (SPEC §4: ViT-Tiny, mask ratio 0.75, AdamW): masked autoencoders trained on the
peers' unlabeled shards, encoder and decoder mixed by gossip.

A local step takes one view per image (MAE's augmentation: RandomResizedCrop with scale 0.2–1 and a horizontal
flip, from the peer's augmentation stream, then the dataset normalisation), masks round(mask_ratio · N) of its
N patches at random (a fresh mask per image and step, from the peer's own stream (seed, peer, "mask")), runs
the encoder on the visible patches and the decoder on all positions, and minimises the MSE on the masked
patches against per-patch normalised targets (`p2pfl.losses.mae`). Scored like Dec-SSL: kNN monitor and
linear probe on `MAENet.features` (mean patch token of the whole image).

Defaults filling unset options: vit-tiny, AdamW with MAE's weight decay 0.05 (on every parameter); the learning
rate stays the project's. Only vit-tiny is accepted (`allowed`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from p2pfl.algorithms.gossip_learner import GossipLearner, GossipPeer
from p2pfl.algorithms.local_batch import PeerBatch, StepLoss
from p2pfl.algorithms.peer import Peer
from p2pfl.algorithms.scoring import representation_scores
from p2pfl.capabilities import FEATURES, SEQUENCE_LABELS, TOKENS
from p2pfl.data.augment import crop_resize_flip, normalize, sample_crop_boxes
from p2pfl.losses.mae import mae_loss, patchify, random_masking
from p2pfl.models import build_encoder
from p2pfl.models.mae import MAENet
from p2pfl.options import method_options, opt
from p2pfl.seeding import torch_generator

MAE_CROP_SCALE = (0.2, 1.0)  # MAE's pre-training RandomResizedCrop
MAE_WEIGHT_DECAY = 0.05
DECODER = {"decoder_dim": 128, "decoder_depth": 2, "decoder_heads": 4}  # small: a 2-core CPU can run it


@dataclass(eq=False)
class MAEPeer(GossipPeer):
    """A gossip peer with its own mask stream (seed, peer, "mask"), checkpointed with the record."""

    mask_rng: torch.Generator = None


@method_options("dec-mae")
class DecMAEOptions:
    """MAE's masking."""

    mask_ratio: float = opt(0.75, "MAE: fraction of patches masked", section="ssl", paper="MAE (SPEC §4)",
                            bounds="(0, 1)")


class DecMAE(GossipLearner):
    """Masked-autoencoder encoders (and decoders) trained locally and mixed by gossip."""

    scores_representations = True
    name = "dec-mae"
    record: ClassVar[type[Peer]] = MAEPeer
    lacks = {FEATURES: "it reconstructs masked image patches", TOKENS: "it reconstructs masked image patches",
             SEQUENCE_LABELS: "it reconstructs masked image patches"}
    defaults = {"model": "vit-tiny", "optimizer": "adamw", "weight_decay": MAE_WEIGHT_DECAY}
    allowed = {"model": ("vit-tiny",)}

    def make_model(self) -> nn.Module:
        encoder = build_encoder(self.cfg.model, self.work.channels, self.work.image_size, cfg=self.cfg)
        return MAENet(encoder, **DECODER)

    def init_peer(self, peer: MAEPeer) -> None:
        super().init_peer(peer)
        peer.mask_rng = torch_generator(self.cfg.seed, peer.id, "mask", self.ctx.device)

    def augment(self, peer: MAEPeer, x: torch.Tensor) -> torch.Tensor:
        """One normalised view per image: random resized crop (scale 0.2–1) and flip (where the dataset allows it)
        from the peer's stream."""
        b, _, h, w = x.shape
        boxes = sample_crop_boxes(b, h, w, peer.augment_rng, MAE_CROP_SCALE, device=x.device)
        flip = torch.rand(b, generator=peer.augment_rng, device=x.device) < self.dataset.transform.flip_p
        return normalize(crop_resize_flip(x, boxes, flip, self.work.image_size), self.dataset.mean, self.dataset.std)

    def local_loss(self, batch: PeerBatch) -> StepLoss:
        peer, x, _ = batch.alone()
        view = self.augment(peer, x)
        model: MAENet = peer.model
        keep, mask, restore = random_masking(view.shape[0], model.n_patches, self.cfg.mask_ratio, peer.mask_rng)
        pred = model(view, keep, restore)
        return mae_loss(pred, patchify(view, model.patch), mask), {}

    def score(self, model: nn.Module, peer: int | None, final: bool) -> dict[str, float]:
        return representation_scores(self, model, peer, final)
