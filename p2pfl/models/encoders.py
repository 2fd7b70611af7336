"""Model families as registered components (--model): `MODELS`, the `Model` base, and `build_encoder`.

A model is a class registered with ``@MODELS.register("name")`` whose `build(in_channels, image_size, **kw)`
returns its encoder: an nn.Module mapping float images (B, C, H, W) to features (B, feat_dim), with an int
attribute `feat_dim` (the heads a method puts on it read it). Its `Options` (flags, YAML keys) reach it as
``self.options``; ``kw`` are the family's keyword options a caller passes (vit-tiny's depth, hf's lora_rank).
The built-ins register in their own files (cnn.py, resnet.py, vit.py) with the constructor as `build`.

Capabilities: "cpu-stacked-faster": --batch-peers auto stacks its peers on a CPU too (measured faster there;
p2pfl.algorithms.batched). Whether a model can run peer-stacked at all is read off its modules
(p2pfl.models.stacked: a module class whose forward acts per channel says ``peer_stackable = True``).

``hf:<local path>`` (a local Hugging Face vision model, optional LoRA) is a prefix form, not a registered name.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from torch import nn

from p2pfl.models.base import ModelConfigError
from p2pfl.registry import Component, Registry, options_of

#: The model families; the built-ins are registered by the modules of p2pfl.models.
MODELS: Registry[type[Model]] = Registry("model", option="model", package="p2pfl.models")
HF_PREFIX = "hf:"


class Model(Component):
    """A model family: `build` makes its encoder for one input geometry."""

    def __init__(self, options: Any = None) -> None:
        self.options = options  # its Options as the run holds them (their defaults outside a run); None without

    def build(self, in_channels: int, image_size: int, **kw: Any) -> nn.Module:
        """The encoder for (in_channels, image_size, image_size) images: an nn.Module with an int `feat_dim`."""
        raise NotImplementedError


class ModelNames(list):
    """The --model values: the registered names and the prefix form ``hf:PATH``, which any ``hf:<path>`` is."""

    def __contains__(self, value: object) -> bool:
        return list.__contains__(self, value) or (isinstance(value, str) and value.startswith(HF_PREFIX)
                                                 and len(value) > len(HF_PREFIX))


def model_choices() -> ModelNames:
    """The values --model accepts (its choices in --help and the configuration's check)."""
    return ModelNames([*MODELS.names(), HF_PREFIX + "PATH"])


def encoder_names() -> list[str]:
    """The accepted encoder names (``hf:<local path>`` stands for any local Hugging Face directory)."""
    return [*MODELS.names(), HF_PREFIX + "<local path>"]


def _call_checked(name: str, builder: Callable[..., nn.Module], *args: Any, **kw: Any) -> nn.Module:
    params = inspect.signature(builder).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        allowed = [k for k in params if k not in ("in_channels", "image_size", "path")]
        bad = sorted(set(kw) - set(allowed))
        if bad:
            raise ModelConfigError(
                f"encoder {name!r} does not take option(s) {', '.join(bad)}; allowed: {', '.join(allowed) or 'none'}"
            )
    return builder(*args, **kw)


def build_encoder(name: str, in_channels: int, image_size: int, cfg: Any = None, **kw: Any) -> nn.Module:
    """Build encoder ``name`` for (in_channels, image_size, image_size) inputs; its Options as the run's
    configuration ``cfg`` holds them (defaults without one); ``kw`` are family options."""
    if name.startswith(HF_PREFIX):
        from p2pfl.models.hf import HFEncoder

        return _call_checked(name, HFEncoder, name[len(HF_PREFIX):], in_channels, image_size, **kw)
    if name not in MODELS:
        raise ModelConfigError(f"unknown encoder {name!r}; known: {', '.join(encoder_names())}")
    cls = MODELS.get(name)
    encoder = _call_checked(cls.name, cls(options_of(cls, cfg)).build, in_channels, image_size, **kw)
    feat = getattr(encoder, "feat_dim", None)
    if not isinstance(encoder, nn.Module) or not isinstance(feat, int) or isinstance(feat, bool) or feat < 1:
        raise ModelConfigError(f"--model {cls.name}: build() must return an nn.Module with an int feat_dim >= 1, "
                               f"got {type(encoder).__name__} with feat_dim {feat!r}")
    return encoder


def takes(name: str, option: str) -> bool:
    """Whether encoder `name`'s family takes the keyword option `option` (hf:'s lora_rank), so a caller passes it
    only to those that do."""
    if name.startswith(HF_PREFIX):
        from p2pfl.models.hf import HFEncoder

        builder: Callable[..., Any] = HFEncoder
    elif name in MODELS:
        builder = MODELS.get(name).build
    else:
        return False
    return option in inspect.signature(builder).parameters


__all__ = ["HF_PREFIX", "MODELS", "Model", "build_encoder", "encoder_names", "model_choices", "takes"]
