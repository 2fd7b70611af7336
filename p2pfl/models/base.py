"""The encoder interface shared by every model family, the option error type, and the import of the optional
Hugging Face libraries."""
from __future__ import annotations

import importlib
from types import ModuleType

import torch
from torch import nn


class ModelConfigError(ValueError):
    """A user-chosen model option is wrong (unknown name, bad size, unknown keyword)."""


def hf_library(module: str, what: str) -> ModuleType:
    """Import `module` of transformers or peft (the optional `hf` extra: hf: encoders, vit-tiny, MAE, LoRA), or a
    ModelConfigError whose one line says that `what` needs it and how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        if exc.name is not None and exc.name.split(".")[0] != top:
            raise  # the library is there but something it needs is broken: its own error says what
        raise ModelConfigError(f"{what} needs {top}, which is not installed (the optional dependencies of "
                               "the 'hf' extra: pip install 'p2pfl-sim[hf]')") from None


class Encoder(nn.Module):
    """A feature extractor: forward maps (B, C, H, W) float images to (B, feat_dim) features.

    Subclasses set ``feat_dim``. A subclass whose weights need an explicit initialisation scheme (rather
    than every submodule's own ``reset_parameters``) defines ``p2pfl_init_()``; ``params.init_model`` calls it.
    """

    feat_dim: int
    in_channels: int
    image_size: int


def check_geometry(name: str, in_channels: int, image_size: int, min_size: int = 1) -> None:
    """Raise ``ModelConfigError`` when the input geometry cannot be used by encoder ``name``."""
    if int(in_channels) < 1:
        raise ModelConfigError(f"encoder {name!r}: in_channels must be >= 1, got {in_channels}")
    if int(image_size) < min_size:
        raise ModelConfigError(f"encoder {name!r}: image_size must be >= {min_size}, got {image_size}")


def last_positions(h: torch.Tensor, x: torch.Tensor, padding: int) -> torch.Tensor:
    """B×F: each sequence's features (h, B×T×F) at the last position of x (B×T token ids) holding a token other
    than `padding` (position 0 when all are padding). A causal model's features there have read the whole
    sequence and no padding after it: how char-lstm and char-transformer classify a sequence (SEQUENCE_LABELS)."""
    positions = torch.arange(x.shape[1], device=x.device).expand_as(x)
    last = torch.where(x != padding, positions, 0).amax(dim=1)
    return h[torch.arange(x.shape[0], device=x.device), last]


class MaxPool2x2(nn.MaxPool2d):
    """nn.MaxPool2d(2, 2). Without gradients (evaluation, reference models) it takes the maximum of strided views,
    which gives the same values several times faster on a CPU than max_pool2d's kernel; with gradients it is
    max_pool2d itself (whose backward picks the first maximum of a tie)."""

    def __init__(self) -> None:
        super().__init__(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() or x.dim() != 4:
            return super().forward(x)
        h, w = x.shape[2] // 2 * 2, x.shape[3] // 2 * 2
        rows = torch.maximum(x[:, :, 0:h:2, :w], x[:, :, 1:h:2, :w])
        return torch.maximum(rows[..., 0::2], rows[..., 1::2])
