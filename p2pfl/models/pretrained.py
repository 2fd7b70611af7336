"""The file of a pretrained built-in encoder (written by ``python -m p2pfl.pretrain``): its state dict and what it
was trained on, and loading it, bit for bit, into the encoder of every peer whose peers-spec group names it
(`init: PATH`)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from p2pfl.models.params import state_copy

#: The file format of a built-in encoder's checkpoint.
FORMAT = "p2pfl-pretrained/1"


class PretrainError(ValueError):
    """Bad pretraining input or an `init:` checkpoint that does not fit its peers; one line."""


def write_checkpoint(encoder: nn.Module, path: Path, about: dict[str, Any]) -> None:
    """The encoder's state dict and `about`, replaced atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save({**about, "encoder": state_copy(encoder)}, tmp)
    os.replace(tmp, path)


def load_into(encoder: nn.Module, path: str, model: str, channels: int, image_size: int) -> None:
    """Load the pretrained encoder at `path` into `encoder` (the peers' `model`, `channels` x `image_size`),
    strictly; a file that is not such a checkpoint or was made for another model is one line."""
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file is the same user error
        raise PretrainError(f"init {path}: not a readable checkpoint ({type(e).__name__})") from e
    if not isinstance(saved, dict) or saved.get("format") != FORMAT:
        raise PretrainError(f"init {path}: not written by python -m p2pfl.pretrain")
    if (saved["model"], saved["in_channels"], saved["image_size"]) != (model, channels, image_size):
        raise PretrainError(f"init {path}: made for {saved['model']} on {saved['in_channels']}x"
                            f"{saved['image_size']}px images, the peers have {model} on {channels}x{image_size}px")
    encoder.load_state_dict(saved["encoder"], strict=True)
