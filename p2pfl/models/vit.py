"""A small Vision Transformer built from scratch with ``transformers.ViTConfig`` / ``ViTModel`` (no weights
are downloaded). Default: patch 4, hidden 192, 6 layers, 3 heads, MLP 4x (ViT-Tiny widths, half depth)."""
from __future__ import annotations

import torch
from torch import nn

from .base import Encoder, ModelConfigError, check_geometry, hf_library
from .encoders import MODELS, Model

POOLS = ("cls", "mean")


class ViTEncoder(Encoder):
    """ViT encoder; feature = final-LayerNorm CLS token (pool="cls") or mean of the patch tokens (pool="mean").

    Initialisation (``p2pfl_init_``, mirrors transformers' ViT scheme with plain torch.nn.init): Linear and
    patch-conv weights normal(0, initializer_range), biases 0, LayerNorm 1/0, position embeddings and CLS token
    truncated normal(0, initializer_range).
    """

    def __init__(
        self,
        in_channels: int = 3,
        image_size: int = 32,
        patch_size: int = 4,
        hidden_size: int = 192,
        depth: int = 6,
        heads: int = 3,
        mlp_ratio: float = 4.0,
        dropout: float = 0.0,
        pool: str = "mean",
        initializer_range: float = 0.02,
    ) -> None:
        super().__init__()
        transformers = hf_library("transformers", "encoder 'vit-tiny'")
        ViTConfig, ViTModel = transformers.ViTConfig, transformers.ViTModel

        check_geometry("vit-tiny", in_channels, image_size, min_size=patch_size)
        if image_size % patch_size:
            raise ModelConfigError(
                f"encoder 'vit-tiny': image_size {image_size} must be a multiple of patch_size {patch_size}"
            )
        if hidden_size % heads:
            raise ModelConfigError(f"encoder 'vit-tiny': hidden_size {hidden_size} must be divisible by heads {heads}")
        if pool not in POOLS:
            raise ModelConfigError(f"encoder 'vit-tiny': pool must be one of {', '.join(POOLS)}, got {pool!r}")
        self.in_channels, self.image_size, self.pool = int(in_channels), int(image_size), pool
        self.config = ViTConfig(
            image_size=image_size,
            patch_size=patch_size,
            num_channels=in_channels,
            hidden_size=hidden_size,
            num_hidden_layers=depth,
            num_attention_heads=heads,
            intermediate_size=int(round(hidden_size * mlp_ratio)),
            hidden_dropout_prob=dropout,
            attention_probs_dropout_prob=dropout,
            initializer_range=initializer_range,
        )
        self.vit = ViTModel(self.config, add_pooling_layer=False)
        self.feat_dim = int(hidden_size)
        self.p2pfl_init_()

    def p2pfl_init_(self) -> None:
        """Re-initialise every weight with the documented ViT scheme."""
        std = self.config.initializer_range
        with torch.no_grad():
            for m in self.vit.modules():
                if isinstance(m, (nn.Linear, nn.Conv2d)):
                    nn.init.normal_(m.weight, 0.0, std)
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)
                elif isinstance(m, nn.LayerNorm):
                    nn.init.ones_(m.weight)
                    nn.init.zeros_(m.bias)
            emb = self.vit.embeddings
            nn.init.trunc_normal_(emb.position_embeddings, 0.0, std)
            nn.init.trunc_normal_(emb.cls_token, 0.0, std)
            if getattr(emb, "mask_token", None) is not None:
                nn.init.zeros_(emb.mask_token)

    def tokens(self, x: torch.Tensor) -> torch.Tensor:
        """All final-layer tokens (B, 1 + num_patches, hidden), CLS first."""
        return self.vit(pixel_values=x).last_hidden_state

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.tokens(x)
        return t[:, 0] if self.pool == "cls" else t[:, 1:].mean(dim=1)


@MODELS.register("vit-tiny")
class ViTTinyModel(Model):
    """A small Vision Transformer (feat_dim 192; not peer-stackable: attention and LayerNorm)."""

    build = staticmethod(ViTEncoder)
