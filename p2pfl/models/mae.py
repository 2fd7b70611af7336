"""A masked autoencoder on the project's ViT (He et al., MAE): the encoder sees only the visible patches (plus its
class token); a small transformer decoder fills the masked positions with a learned mask token, adds its own
positional embeddings and predicts every patch's values. Encoder and decoder are one module, so gossip mixes
both (the decoder is mixed too).

The decoder reuses the ViT's transformer block (transformers' ViTLayer: pre-norm attention + MLP 4x) at
width `decoder_dim`; its positional embeddings are learned (the ViT encoder's are learned too), initialised
like the encoder's. The probe feature is the mean of the encoder's final patch tokens on the whole, unmasked
image (MAE's usual choice for linear probing; the class token gets no training signal from reconstruction).
"""
from __future__ import annotations

import torch
from torch import nn

from .base import ModelConfigError, hf_library
from .vit import ViTEncoder


class MAEDecoder(nn.Module):
    """Encoder tokens (B, 1 + kept, enc_dim), CLS first, -> predicted patches (B, N, patch_dim)."""

    def __init__(self, enc_dim: int, n_patches: int, patch_dim: int, dim: int, depth: int, heads: int,
                 attn_implementation: str | None = None, initializer_range: float = 0.02) -> None:
        super().__init__()
        ViTConfig = hf_library("transformers", "MAE's decoder").ViTConfig
        ViTLayer = hf_library("transformers.models.vit.modeling_vit", "MAE's decoder").ViTLayer

        if dim % heads:
            raise ModelConfigError(f"MAE decoder: decoder_dim {dim} must be divisible by decoder_heads {heads}")
        if depth < 1:
            raise ModelConfigError(f"MAE decoder: decoder_depth must be >= 1, got {depth}")
        config = ViTConfig(hidden_size=dim, num_hidden_layers=depth, num_attention_heads=heads,
                           intermediate_size=4 * dim, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                           initializer_range=initializer_range)
        config._attn_implementation = attn_implementation or "sdpa"
        self.std = initializer_range
        self.n_patches = n_patches
        self.embed = nn.Linear(enc_dim, dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, 1 + n_patches, dim))
        self.blocks = nn.ModuleList(ViTLayer(config) for _ in range(depth))
        self.norm = nn.LayerNorm(dim, eps=config.layer_norm_eps)
        self.head = nn.Linear(dim, patch_dim)

    def p2pfl_init_(self) -> None:
        """The ViT scheme: Linear weights normal(0, std), biases 0, LayerNorm 1/0; the mask token and the
        positional embeddings truncated normal(0, std)."""
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.normal_(m.weight, 0.0, self.std)
                    nn.init.zeros_(m.bias)
                elif isinstance(m, nn.LayerNorm):
                    nn.init.ones_(m.weight)
                    nn.init.zeros_(m.bias)
            nn.init.trunc_normal_(self.mask_token, 0.0, self.std)
            nn.init.trunc_normal_(self.pos, 0.0, self.std)

    def forward(self, tokens: torch.Tensor, restore: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        b, visible, dim = x.shape[0], x.shape[1] - 1, x.shape[2]
        fill = self.mask_token.expand(b, self.n_patches - visible, dim)
        patches = torch.cat([x[:, 1:], fill], dim=1)  # [visible in keep order, masked]
        patches = torch.gather(patches, 1, restore.unsqueeze(-1).expand(-1, -1, dim))  # back in patch order
        x = torch.cat([x[:, :1], patches], dim=1) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))[:, 1:]


class MAENet(nn.Module):
    """ViT encoder on the visible patches + `MAEDecoder`; forward(x, keep, restore) -> (B, N, p·p·C) predicted
    patches (the order of `p2pfl.losses.mae.patchify`); `features(x)` the probe feature (mean patch token)."""

    def __init__(self, encoder: ViTEncoder, decoder_dim: int = 128, decoder_depth: int = 2,
                 decoder_heads: int = 4) -> None:
        super().__init__()
        if not isinstance(encoder, ViTEncoder):
            raise ModelConfigError(f"MAE needs a ViT encoder (vit-tiny), got {type(encoder).__name__}")
        self.encoder = encoder
        cfg = encoder.config
        self.patch = int(cfg.patch_size)
        self.channels = int(cfg.num_channels)
        self.n_patches = (int(cfg.image_size) // self.patch) ** 2
        self.decoder = MAEDecoder(int(cfg.hidden_size), self.n_patches, self.patch * self.patch * self.channels,
                                  decoder_dim, decoder_depth, decoder_heads, cfg._attn_implementation,
                                  cfg.initializer_range)

    def encode_visible(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """Final encoder tokens (B, 1 + kept, hidden) of the patches `keep` (B, kept), CLS first: the ViT's patch
        embedding and positional embeddings, then its blocks and final LayerNorm on the visible tokens only."""
        vit = self.encoder.vit
        emb = vit.embeddings
        pos = emb.position_embeddings
        t = emb.patch_embeddings(x) + pos[:, 1:]
        t = torch.gather(t, 1, keep.unsqueeze(-1).expand(-1, -1, t.shape[-1]))
        cls = (emb.cls_token + pos[:, :1]).expand(t.shape[0], -1, -1)
        t = emb.dropout(torch.cat([cls, t], dim=1))
        for layer in vit.layers:
            t = layer(t)
        return vit.layernorm(t)

    def forward(self, x: torch.Tensor, keep: torch.Tensor, restore: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encode_visible(x, keep), restore)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Probe feature: the mean of the encoder's final patch tokens on the whole image (no mask)."""
        return self.encoder.tokens(x)[:, 1:].mean(dim=1)
