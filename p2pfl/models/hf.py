"""Any Hugging Face vision backbone from a local directory (``hf:<path>``), optionally with LoRA adapters.

Nothing is downloaded: the model is loaded with ``AutoModel.from_pretrained(path, local_files_only=True)``.
With ``lora_rank > 0`` the backbone is wrapped by ``peft.get_peft_model`` so that only the adapters are
trainable (FedMuscle's setting: LoRA rank 16 on pretrained models); otherwise every weight is fine-tuned.
"""
from __future__ import annotations

import os
import warnings
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .base import Encoder, ModelConfigError, check_geometry, hf_library

POOLS = ("auto", "pooler", "cls", "mean")
# (module-name suffixes) tried in order when target_modules is not given.
_DEFAULT_TARGETS: tuple[tuple[str, ...], ...] = (("query", "value"), ("q_proj", "v_proj"), ("qkv",), ("q", "v"))


def default_lora_targets(model: nn.Module) -> list[str]:
    """The attention query/value projections of ``model``, by the naming conventions transformers uses; for a
    model without attention (a convolutional backbone such as transformers' ResNet), its convolutions.

    Raises ``ModelConfigError`` when none is found (pass ``target_modules`` explicitly then).
    """
    leaf_names = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    for cand in _DEFAULT_TARGETS:
        if set(cand) <= leaf_names:
            return list(cand)
    convolutions = sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, nn.Conv2d)})
    if convolutions:
        return convolutions
    raise ModelConfigError(
        "hf encoder: no default LoRA target modules (query/value, q_proj/v_proj, qkv, or convolutions) in this "
        "model; pass target_modules=[...]"
    )


def _as_hw(size) -> tuple[int, int] | None:
    if size is None:
        return None
    if isinstance(size, int):
        return (size, size)
    if isinstance(size, (list, tuple)) and len(size) == 2:
        return (int(size[0]), int(size[1]))
    return None


class HFEncoder(Encoder):
    """A local Hugging Face vision model as an encoder.

    Feature (``pool``): "auto" = the model's ``pooler_output`` when it has one, else the mean over tokens
    (or over spatial positions for convolutional models); "pooler", "cls" (token 0), "mean" force one.
    Inputs are adapted to the checkpoint: a 1-channel input is repeated to the model's channel count, and
    when the config has an ``image_size`` different from ``image_size`` the batch is bilinearly resized to it
    (``resize=True``; with ``resize=False`` ViT-like models get ``interpolate_pos_encoding=True`` instead).
    LoRA: ``lora_rank`` r, ``lora_alpha`` (default r, scaling 1), ``lora_dropout``, ``target_modules``
    (default: the query/value projections, see ``default_lora_targets``), ``modules_to_save``.
    Initialisation (``p2pfl_init_``): pretrained weights are kept; LoRA adapters are re-drawn
    (A kaiming-uniform, B zero).
    """

    def __init__(
        self,
        path: str,
        in_channels: int = 3,
        image_size: int = 224,
        lora_rank: int = 0,
        lora_alpha: float | None = None,
        lora_dropout: float = 0.0,
        target_modules: Sequence[str] | str | None = None,
        modules_to_save: Sequence[str] | None = None,
        pool: str = "auto",
        resize: bool = True,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        AutoModel = hf_library("transformers", f"encoder 'hf:{path}'").AutoModel

        check_geometry("hf:" + path, in_channels, image_size)
        if not os.path.isdir(path):
            raise ModelConfigError(f"encoder 'hf:{path}': not a local directory (models are never downloaded)")
        if pool not in POOLS:
            raise ModelConfigError(f"encoder 'hf:': pool must be one of {', '.join(POOLS)}, got {pool!r}")
        if int(lora_rank) < 0:
            raise ModelConfigError(f"encoder 'hf:': lora_rank must be >= 0, got {lora_rank}")
        self.path, self.pool, self.lora_rank = path, pool, int(lora_rank)
        self.in_channels, self.image_size = int(in_channels), int(image_size)
        model = AutoModel.from_pretrained(path, local_files_only=True, dtype=dtype)
        cfg = model.config
        self.model_channels = int(getattr(cfg, "num_channels", in_channels))
        if in_channels != self.model_channels and in_channels != 1:
            raise ModelConfigError(
                f"encoder 'hf:{path}': model takes {self.model_channels} channels, input has {in_channels} "
                "(only 1-channel inputs are adapted, by repetition)"
            )
        target = _as_hw(getattr(cfg, "image_size", None))
        self.target_hw = target if target is not None and target != (image_size, image_size) else None
        self.resize = bool(resize)
        # transformers' ViT-family forward accepts interpolate_pos_encoding.
        import inspect

        self._interp_kw = "interpolate_pos_encoding" in inspect.signature(model.forward).parameters

        self.model: nn.Module = model
        was_training = model.training
        model.eval()
        with torch.no_grad():
            probe = torch.zeros(1, in_channels, image_size, image_size, dtype=dtype)
            self.feat_dim = int(self._features(probe).shape[-1])
        model.train(was_training)

        if self.lora_rank > 0:
            peft = hf_library("peft", "encoder 'hf:' with lora_rank > 0")
            LoraConfig, get_peft_model = peft.LoraConfig, peft.get_peft_model

            targets = list(target_modules) if isinstance(target_modules, (list, tuple)) else target_modules
            lcfg = LoraConfig(
                r=self.lora_rank,
                lora_alpha=float(lora_alpha) if lora_alpha is not None else float(self.lora_rank),
                lora_dropout=float(lora_dropout),
                target_modules=targets if targets is not None else default_lora_targets(model),
                modules_to_save=list(modules_to_save) if modules_to_save else None,
                bias="none",
            )
            with warnings.catch_warnings():  # peft calls a deprecated transformers property
                warnings.filterwarnings("ignore", category=FutureWarning)
                self.model = get_peft_model(model, lcfg)

    def _adapt(self, x: torch.Tensor) -> tuple[torch.Tensor, dict]:
        if x.shape[1] == 1 and self.model_channels != 1:
            x = x.expand(-1, self.model_channels, -1, -1)
        kw: dict = {}
        if self.target_hw is not None and tuple(x.shape[-2:]) != self.target_hw:
            if self.resize:
                x = F.interpolate(x, size=self.target_hw, mode="bilinear", align_corners=False)
            elif self._interp_kw:
                kw["interpolate_pos_encoding"] = True
        return x, kw

    def _features(self, x: torch.Tensor) -> torch.Tensor:
        x, kw = self._adapt(x)
        out = self.model(pixel_values=x, **kw)
        pooled = getattr(out, "pooler_output", None)
        hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        if self.pool in ("auto", "pooler") and pooled is not None:
            return torch.flatten(pooled, 1)
        if self.pool == "pooler":
            raise ModelConfigError(f"encoder 'hf:{self.path}': model has no pooler_output; use pool='mean' or 'cls'")
        if hidden.dim() == 4:  # convolutional backbone: (B, C, H, W)
            if self.pool == "cls":
                raise ModelConfigError(f"encoder 'hf:{self.path}': pool='cls' needs a token model")
            return hidden.mean(dim=(2, 3))
        return hidden[:, 0] if self.pool == "cls" else hidden.mean(dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._features(x)

    def p2pfl_init_(self) -> None:
        """Keep the pretrained weights; re-draw every LoRA adapter (A kaiming-uniform, B zero)."""
        if self.lora_rank <= 0:
            return
        LoraLayer = hf_library("peft.tuners.lora", "encoder 'hf:' with lora_rank > 0").LoraLayer

        with torch.no_grad():
            for m in self.model.modules():
                if isinstance(m, LoraLayer):
                    for adapter in list(m.lora_A.keys()):
                        m.reset_lora_parameters(adapter, True)
