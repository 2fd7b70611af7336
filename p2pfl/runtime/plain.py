"""What a checkpoint may hold: tensors and plain values, so that reading one can never run code.

A checkpoint is read with `torch.load(..., weights_only=True)`, whose unpickler builds tensors and containers but
calls no other function; this module turns what a peer record holds into that form and back. Plain values are
dict (OrderedDict too: module state dicts), list, tuple, int, float, str, bool and None, nested; tensors are
torch.Tensor. Random generators are kept by their state: torch's as its byte tensor, numpy's `Generator` and
`RandomState` as their state dicts (arrays as tensors), python's `random.Random` as its state tuple. Anything
else is refused by name (`check_plain`), on saving as on loading.
"""
from __future__ import annotations

import random
from collections import OrderedDict
from typing import Any

import numpy as np
import torch

PLAIN_SCALARS = (int, float, str, bool, type(None))
#: What `generator_state` returns for a value that is no random generator.
NOT_A_GENERATOR = object()


def check_plain(value: Any, where: str) -> None:
    """Raise TypeError naming the first value under `where` that is neither a tensor nor a plain value."""
    kind = type(value)
    if kind in PLAIN_SCALARS or isinstance(value, torch.Tensor):
        return
    if kind in (dict, OrderedDict):
        for key, item in value.items():
            if type(key) not in PLAIN_SCALARS:
                raise TypeError(f"{where}: a key of type {type(key).__name__}")
            check_plain(item, f"{where}.{key}")
        return
    if kind in (list, tuple):
        for i, item in enumerate(value):
            check_plain(item, f"{where}[{i}]")
        return
    raise TypeError(f"{where}: a {kind.__module__}.{kind.__qualname__}")


def to_plain(value: Any) -> Any:
    """`value` with numpy arrays as tensors and numpy scalars as python numbers; a container is rebuilt only
    where something in it changed (so a module's state dict stays itself, its `_metadata` included)."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value).copy())
    if isinstance(value, np.generic):
        return value.item()
    if type(value) in (dict, OrderedDict):
        items = {k: to_plain(v) for k, v in value.items()}
        if all(items[k] is v for k, v in value.items()):
            return value
        out = type(value)(items)
        if hasattr(value, "_metadata"):
            out._metadata = value._metadata
        return out
    if type(value) in (list, tuple):
        parts = [to_plain(v) for v in value]
        return value if all(p is v for p, v in zip(parts, value)) else type(value)(parts)
    return value


def numpy_like(saved: Any, current: Any) -> Any:
    """`saved` (from `to_plain`) with tensors back as numpy arrays where `current`, a value of the same shape of
    containers, holds arrays (numpy generators' states)."""
    if isinstance(current, np.ndarray):
        return np.asarray(saved.cpu().numpy(), dtype=current.dtype)
    if isinstance(current, dict) and isinstance(saved, dict):
        return {k: numpy_like(v, current.get(k)) for k, v in saved.items()}
    if isinstance(current, (list, tuple)) and isinstance(saved, (list, tuple)):
        return type(saved)(numpy_like(s, c) for s, c in zip(saved, current))
    return saved


def generator_state(value: Any) -> Any:
    """The state of a random generator in plain values (`NOT_A_GENERATOR` for anything else)."""
    if isinstance(value, torch.Generator):
        return value.get_state()
    if isinstance(value, np.random.Generator):
        return to_plain(value.bit_generator.state)
    if isinstance(value, np.random.RandomState):
        return to_plain(value.get_state(legacy=False))
    if isinstance(value, random.Random):
        return value.getstate()
    return NOT_A_GENERATOR


def set_generator_state(current: Any, saved: Any) -> bool:
    """Put `saved` (from `generator_state`) back into the generator `current`; False when it is none."""
    if isinstance(current, torch.Generator):
        current.set_state(saved.cpu())  # a checkpoint restored onto a GPU moved it there
    elif isinstance(current, np.random.Generator):
        current.bit_generator.state = numpy_like(saved, current.bit_generator.state)
    elif isinstance(current, np.random.RandomState):
        current.set_state(numpy_like(saved, current.get_state(legacy=False)))
    elif isinstance(current, random.Random):
        current.setstate(saved)
    else:
        return False
    return True

