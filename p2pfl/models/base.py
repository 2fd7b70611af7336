"""The encoder interface shared by every model family, and the option error type."""
from __future__ import annotations

from torch import nn


class ModelConfigError(ValueError):
    """A user-chosen model option is wrong (unknown name, bad size, unknown keyword)."""


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
