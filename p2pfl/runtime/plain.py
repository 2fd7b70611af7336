"""What a checkpoint may hold: tensors and plain values, so that reading one can never run code.

A checkpoint is read with `torch.load(..., weights_only=True)`, whose unpickler builds tensors and containers but
calls no other function; this module turns what a peer record holds into that form and back. Plain values are
dict (OrderedDict too: module state dicts), list, tuple, int, float, str, bool and None, nested; tensors are
torch.Tensor. Random generators are kept by their state: torch's as its byte tensor, numpy's `Generator` and
`RandomState` as their state dicts (arrays as tensors), python's `random.Random` as its state tuple. Anything
else, or values nested deeper than MAX_DEPTH, is refused by name (`check_plain`), on saving as on loading; what is
loaded must also have the form of what a freshly set-up record saves (`misfit`).
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
#: How deep containers may nest in a checkpoint (a record's state dicts nest a few levels).
MAX_DEPTH = 64


class TooDeep(TypeError):
    """Containers nested deeper than MAX_DEPTH."""


def check_plain(value: Any, where: str, depth: int = 0) -> None:
    """Raise TypeError naming the first value under `where` that is neither a tensor nor a plain value (TooDeep
    where containers nest deeper than MAX_DEPTH)."""
    kind = type(value)
    if kind in PLAIN_SCALARS or isinstance(value, torch.Tensor):
        return
    if kind in (dict, OrderedDict, list, tuple) and depth >= MAX_DEPTH:
        raise TooDeep(f"{where}: containers nested deeper than {MAX_DEPTH} levels")
    if kind in (dict, OrderedDict):
        for key, item in value.items():
            if type(key) not in PLAIN_SCALARS:
                raise TypeError(f"{where}: a key of type {type(key).__name__}")
            check_plain(item, f"{where}.{key}", depth + 1)
        return
    if kind in (list, tuple):
        for i, item in enumerate(value):
            check_plain(item, f"{where}[{i}]", depth + 1)
        return
    raise TypeError(f"{where}: a {kind.__module__}.{kind.__qualname__}")


def _kind(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor of shape {list(value.shape)}"
    if isinstance(value, dict):
        return "a dict"
    if isinstance(value, (list, tuple)):
        return "a list"
    return "a number" if isinstance(value, (int, float)) else f"a {type(value).__name__}"


def misfit(saved: Any, fresh: Any, where: str) -> str | None:
    """Where plain `saved` (a loaded checkpoint's) has another form than `fresh` (what the freshly set-up record
    saves), as '<where> is <kind> where this run has <kind>'; None when it fits. Tensors must agree in dtype and
    shape, containers in kind (their common keys and items alike), scalars in kind (numbers are one kind); an
    empty fresh tensor takes any tensor, and a fresh None, or a container the fresh record leaves empty (a new
    optimiser's state), any value."""
    if fresh is None:
        return None
    if isinstance(fresh, torch.Tensor) and fresh.numel() == 0 and isinstance(saved, torch.Tensor):
        return None  # a placeholder the record fills as it runs
    if _kind(saved) != _kind(fresh):
        return f"{where} is {_kind(saved)} where this run has {_kind(fresh)}"
    if isinstance(fresh, dict):
        common = (key for key in fresh if key in saved)
        return next(filter(None, (misfit(saved[key], fresh[key], f"{where}.{key}") for key in common)), None)
    if isinstance(fresh, (list, tuple)):
        pairs = zip(saved, fresh)
        return next(filter(None, (misfit(s, f, f"{where}[{i}]") for i, (s, f) in enumerate(pairs))), None)
    return None


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

