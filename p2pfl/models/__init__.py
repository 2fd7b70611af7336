"""Model families and the encoder registry.

``build_encoder(name, in_channels, image_size, **kw)`` returns an ``Encoder`` (forward (B,C,H,W) ->
(B, feat_dim)). Names: "simple-cnn", "resnet18", "resnet-small", "vit-tiny", and "hf:<local path>"
(a local Hugging Face vision model, optional LoRA). Options not taken by an encoder raise ``ModelConfigError``.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable

from .base import Encoder, ModelConfigError
from .cnn import SimpleCNN
from .heads import LinearClassifier, MoonHead, ProjectionHead
from .hf import HFEncoder, default_lora_targets
from .nets import MoonNet, RepresentationNet, SimCLRNet, SupervisedNet
from .params import (
    MixableState,
    bn_parameter_mask,
    bn_tensor_names,
    count_parameters,
    init_model,
    trainable_parameter_names,
)
from .resnet import BasicBlock, CifarResNet, resnet18, resnet_small
from .vit import ViTEncoder

ENCODERS: dict[str, Callable[..., Encoder]] = {
    "simple-cnn": SimpleCNN,
    "resnet18": resnet18,
    "resnet-small": resnet_small,
    "vit-tiny": ViTEncoder,
}
HF_PREFIX = "hf:"


def encoder_names() -> list[str]:
    """The accepted encoder names (``hf:<local path>`` stands for any local Hugging Face directory)."""
    return [*ENCODERS, HF_PREFIX + "<local path>"]


def register_encoder(name: str, builder: Callable[..., Encoder]) -> None:
    """Add an encoder family; ``builder(in_channels, image_size, **kw)`` must return an ``Encoder``."""
    if name in ENCODERS or name.startswith(HF_PREFIX):
        raise ModelConfigError(f"encoder name {name!r} is already taken")
    ENCODERS[name] = builder


def _call_checked(name: str, builder: Callable[..., Encoder], *args, **kw) -> Encoder:
    params = inspect.signature(builder).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        allowed = [k for k in params if k not in ("in_channels", "image_size", "path")]
        bad = sorted(set(kw) - set(allowed))
        if bad:
            raise ModelConfigError(
                f"encoder {name!r} does not take option(s) {', '.join(bad)}; allowed: {', '.join(allowed) or 'none'}"
            )
    return builder(*args, **kw)


def build_encoder(name: str, in_channels: int, image_size: int, **kw) -> Encoder:
    """Build encoder ``name`` for (in_channels, image_size, image_size) inputs; ``kw`` are family options."""
    if name.startswith(HF_PREFIX):
        path = name[len(HF_PREFIX):]
        return _call_checked(name, HFEncoder, path, in_channels, image_size, **kw)
    if name not in ENCODERS:
        raise ModelConfigError(f"unknown encoder {name!r}; known: {', '.join(encoder_names())}")
    return _call_checked(name, ENCODERS[name], in_channels, image_size, **kw)


__all__ = [
    "BasicBlock", "CifarResNet", "ENCODERS", "Encoder", "HFEncoder", "LinearClassifier", "MixableState",
    "ModelConfigError", "MoonHead", "MoonNet", "ProjectionHead", "RepresentationNet", "SimCLRNet", "SimpleCNN",
    "SupervisedNet", "ViTEncoder", "bn_parameter_mask", "bn_tensor_names", "build_encoder", "count_parameters",
    "default_lora_targets", "encoder_names", "init_model", "register_encoder", "resnet18", "resnet_small",
    "trainable_parameter_names",
]
