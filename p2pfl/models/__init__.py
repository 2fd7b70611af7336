"""Model families and the networks the methods build on them.

``build_encoder(name, in_channels, image_size, cfg=None, **kw)`` returns an encoder (forward (B,C,H,W) ->
(B, feat_dim)) of a family registered in `MODELS` (p2pfl.models.encoders: "simple-cnn", "resnet18",
"resnet-small", "vit-tiny", a researcher's own) or "hf:<local path>" (a local Hugging Face vision model, optional
LoRA). Options not taken by an encoder raise ``ModelConfigError``.
"""
from __future__ import annotations

from .base import Encoder, ModelConfigError
from .cnn import SimpleCNN
from .encoders import HF_PREFIX, MODELS, Model, build_encoder, encoder_names
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

__all__ = [
    "BasicBlock", "CifarResNet", "Encoder", "HFEncoder", "HF_PREFIX", "LinearClassifier", "MODELS", "MixableState",
    "Model", "ModelConfigError", "MoonHead", "MoonNet", "ProjectionHead", "RepresentationNet", "SimCLRNet",
    "SimpleCNN", "SupervisedNet", "ViTEncoder", "bn_parameter_mask", "bn_tensor_names", "build_encoder",
    "count_parameters", "default_lora_targets", "encoder_names", "init_model", "resnet18", "resnet_small",
    "trainable_parameter_names",
]
