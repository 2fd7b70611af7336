"""``--model char-transformer``: a tiny causal transformer over token ids, the other encoder of text (token
sequences, p2pfl.capabilities.TOKENS).

Built for a vocabulary of `in_channels` tokens and sequences of at most `image_size` tokens: token and learned
position embeddings of width ``--transformer-dim``, ``--transformer-layers`` pre-norm encoder layers of
``--transformer-heads`` heads (feed-forward 4× the width, GELU, no dropout) under a causal mask, then a LayerNorm.
Input B×T int64 ids; output B×T×width, position t attending to positions up to t only. Initialisation: PyTorch's
defaults, drawn from the run's init stream. It does not run peer-stacked (attention has no grouped form here):
--batch-peers falls back to one peer at a time, saying so. Built with a ``padding`` id (SEQUENCE_LABELS) its output
is B×width, the features of each sequence's last position holding a token other than padding
(`p2pfl.models.base.last_positions`), which the method's head turns into the logits of the sequence's class.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from p2pfl.capabilities import SEQUENCE_LABELS, TOKENS
from p2pfl.options import Check, opt

from .base import Encoder, ModelConfigError, check_geometry, last_positions
from .encoders import MODELS, Model


class CharTransformer(Encoder):
    """Token and position embeddings, causal pre-norm transformer layers, a final LayerNorm."""

    def __init__(self, in_channels: int, image_size: int, dim: int = 64, layers: int = 2, heads: int = 4,
                 padding: int | None = None) -> None:
        super().__init__()
        check_geometry("char-transformer", in_channels, image_size)
        if dim % heads:
            raise ModelConfigError(f"--transformer-dim {dim} must be a multiple of --transformer-heads {heads}")
        self.in_channels, self.image_size = int(in_channels), int(image_size)
        self.embed = nn.Embedding(self.in_channels, dim)
        self.position = nn.Embedding(self.image_size, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=4 * dim, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.feat_dim = int(dim)
        self.padding = padding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        h = self.embed(x) + self.position(torch.arange(t, device=x.device))
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=x.device, dtype=h.dtype)
        h = self.norm(self.blocks(h, mask=mask, is_causal=True))
        return h if self.padding is None else last_positions(h, x, self.padding)


@MODELS.register("char-transformer")
class CharTransformerModel(Model):
    """A tiny causal transformer (--transformer-dim, --transformer-layers, --transformer-heads): token sequences."""

    capabilities = frozenset({TOKENS, SEQUENCE_LABELS})

    class Options:
        transformer_dim: int = opt(64, "char-transformer: width of its embeddings and layers", section="training",
                                   bounds=">= 1")
        transformer_layers: int = opt(2, "char-transformer: encoder layers", section="training", bounds=">= 1")
        transformer_heads: int = opt(4, "char-transformer: attention heads (dividing the width)", section="training",
                                     bounds=">= 1")

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        check(cfg.transformer_dim % cfg.transformer_heads == 0, "transformer_heads",
              f"must divide --transformer-dim {cfg.transformer_dim}, got {cfg.transformer_heads}")

    def build(self, in_channels: int, image_size: int, padding: int | None = None, **kw: Any) -> nn.Module:
        o = self.options
        return CharTransformer(in_channels, image_size, o.transformer_dim, o.transformer_layers, o.transformer_heads,
                               padding)
