"""``--model char-lstm``: an embedding and an LSTM over token ids, the encoder of text (token sequences,
p2pfl.capabilities.TOKENS).

Built for a vocabulary of `in_channels` tokens (the dataset's classes) and sequences of `image_size` tokens (its
length T, unused: any length runs). Input B×T int64 ids; output B×T×``--lstm-hidden``, one feature vector per
position, each seeing the positions up to it only (a causal model): the method's head over the vocabulary turns
position t's into the logits of token t+1. ``--embed-dim`` is the embedding's width, ``--lstm-layers`` the LSTM's
depth (1 or 2). Initialisation: PyTorch's defaults, drawn from the run's init stream. It does not run peer-stacked
(nn.LSTM's fused kernel has no grouped form): --batch-peers falls back to one peer at a time, saying so.

Built with a ``padding`` id (a dataset of labelled sequences, p2pfl.capabilities.SEQUENCE_LABELS) it classifies a
sequence: its output is then B×``--lstm-hidden``, the features of the last position holding a token other than
padding (`p2pfl.models.base.last_positions`), which the method's head turns into the logits of the sequence's class.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from p2pfl.capabilities import SEQUENCE_LABELS, TOKENS
from p2pfl.options import opt

from .base import Encoder, check_geometry, last_positions
from .encoders import MODELS, Model


class CharLSTM(Encoder):
    """Embedding, then a 1- or 2-layer LSTM (batch first); features per position, or with a `padding` id the
    features of each sequence's last position holding a token."""

    def __init__(self, in_channels: int, image_size: int = 1, embed_dim: int = 32, hidden: int = 128,
                 layers: int = 1, padding: int | None = None) -> None:
        super().__init__()
        check_geometry("char-lstm", in_channels, image_size)
        self.in_channels, self.image_size = int(in_channels), int(image_size)
        self.embed = nn.Embedding(self.in_channels, int(embed_dim))
        self.lstm = nn.LSTM(int(embed_dim), int(hidden), num_layers=int(layers), batch_first=True)
        self.feat_dim = int(hidden)
        self.padding = padding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lstm(self.embed(x))[0]
        return h if self.padding is None else last_positions(h, x, self.padding)


@MODELS.register("char-lstm")
class CharLSTMModel(Model):
    """An embedding and an LSTM (--embed-dim, --lstm-hidden, --lstm-layers): the model of token sequences."""

    capabilities = frozenset({TOKENS, SEQUENCE_LABELS})

    class Options:
        embed_dim: int = opt(32, "char-lstm: width of the token embedding", section="training", bounds=">= 1")
        lstm_hidden: int = opt(128, "char-lstm: width of the LSTM's state (its features per position)",
                               section="training", bounds=">= 1")
        lstm_layers: int = opt(1, "char-lstm: LSTM layers", section="training", bounds="[1, 2]")

    def build(self, in_channels: int, image_size: int, padding: int | None = None, **kw: Any) -> nn.Module:
        o = self.options
        return CharLSTM(in_channels, image_size, o.embed_dim, o.lstm_hidden, o.lstm_layers, padding)
