"""Dec-SSL with SimSiam (SPEC §4; Dec-SSL's `simsiam.py`, algorithms.md §B.2): encoder + projector +
predictor trained on the SimCLR views with SimSiam's stop-gradient loss, the whole model mixed by gossip.

Local loss: D(p1, sg(z2))/2 + D(p2, sg(z1))/2 with D = -cosine (`p2pfl.losses.siamese.simsiam_loss`). Each
view runs as its own batch (`p2pfl.models.siamese`). Gossip mixes everything the peer's model holds (backbone,
projector, predictor, BatchNorm statistics; --fedbn keeps BatchNorm local as for Dec-SSL). Defaults are the
Dec-SSL SimSiam script's: SGD lr 0.03 (its value at batch 256; the script scales it by batch/256), momentum
0.9, weight decay 5e-4. Each round also reports `z_std`, the std of the normalised projections (collapse: 0).
"""
from __future__ import annotations

import torch
from torch import nn

from p2pfl.algorithms.dec_ssl import DEC_SSL_BUDGET, DecSSL
from p2pfl.losses.siamese import output_std, simsiam_loss
from p2pfl.method import BATCHABLE
from p2pfl.models import build_encoder
from p2pfl.models.siamese import SimSiamNet

SIMSIAM_PAPER = {"optimizer": "sgd", "lr": 0.03, "momentum": 0.9, "weight_decay": 5e-4}


class DecSimSiam(DecSSL):
    """SimSiam peers on a gossip graph."""

    name = "dec-simsiam"
    lacks = {BATCHABLE: "the peer-stacked path does not run per-view networks"}
    defaults = {**DEC_SSL_BUDGET, **SIMSIAM_PAPER}
    ignores = {"temperature": "SimSiam's loss is a negative cosine similarity, without a temperature"}

    def make_model(self) -> nn.Module:
        encoder = build_encoder(self.cfg.model, self.work.channels, self.work.image_size, cfg=self.cfg)
        return SimSiamNet(encoder, proj_dim=self.cfg.proj_dim)

    def criterion(self, out: tuple[torch.Tensor, torch.Tensor], y: torch.Tensor, refs: list
                  ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """SimSiam's loss on the model's (z, p) of the two views stacked in order."""
        z, p = out
        z1, z2 = z.chunk(2)
        p1, p2 = p.chunk(2)
        return simsiam_loss(p1, p2, z1, z2), {"z_std": output_std(z)}
