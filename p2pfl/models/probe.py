"""A plug-in model runs one batch at set-up: a shape bug in a researcher's model (a Linear sized for another
input) is one line naming the model, the batch's shape and the plug-in's file and line, before training, not a
traceback at the first training step."""
from __future__ import annotations

import traceback
from pathlib import Path

import torch
from torch import nn

#: The faults a forward pass of a wrongly built model raises (a shape mismatch is a RuntimeError in torch).
FORWARD_FAULTS = (RuntimeError, ValueError, TypeError, IndexError, AssertionError)


def plugin_file(name: str) -> str | None:
    """The source file of registered model `name` when a plug-in registered it (None for p2pfl's own models)."""
    from p2pfl.models.encoders import MODELS

    if name not in MODELS:
        return None
    cls = MODELS.get(name)
    if cls.__module__.split(".")[0] == "p2pfl":
        return None
    import inspect

    try:
        return inspect.getsourcefile(cls)
    except TypeError:
        return None


def where_in(source: str, exc: BaseException) -> str:
    """' at FILE:LINE (in FUNCTION)' of the deepest frame of `exc` inside `source`, '' when none is."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == Path(source)]
    return f" at {frames[-1].filename}:{frames[-1].lineno} (in {frames[-1].name})" if frames else ""


def probe(name: str, model: nn.Module, x: torch.Tensor) -> None:
    """Run `model` (the method's network around plug-in model `name`) on the batch `x` in eval mode without
    gradients, its state untouched (eval mode: batch norm reads its running statistics and updates none; no
    generator is drawn from); a ValueError of one line when the forward pass fails. Nothing for p2pfl's own models.
    """
    source = plugin_file(name)
    if source is None:
        return
    if x.dtype == torch.uint8:  # images as the methods feed them: float, in [0, 1] before normalisation
        x = x.float() / 255
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(x)
    except FORWARD_FAULTS as exc:
        text = " ".join(str(exc).split())[:300]
        raise ValueError(f"--model {name}: fails on one batch of shape {tuple(x.shape)} ({x.dtype}): "
                         f"{type(exc).__name__}: {text}{where_in(source, exc)}") from None
    finally:
        model.train(training)
