"""CIFAR's python batches (torchvision's ``cifar-10-batches-py``, ``cifar-100-python``) read without running code.

A pickle may name any function to call on loading. These files are read by an unpickler that admits only
numpy's array, dtype and scalar constructors (dicts, lists, strings and numbers need none); a file naming
anything else is refused before it is called. What was read must then have a CIFAR batch's form.
"""
from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from p2pfl.runtime.limits import check_bytes, human

try:
    from numpy._core import multiarray, numeric
except ImportError:  # numpy < 2
    from numpy.core import multiarray, numeric

#: How many characters of a refused name the message quotes.
QUOTED = 80
IMAGE_BYTES = 3 * 32 * 32


def _allowed() -> dict[tuple[str, str], Any]:
    """The globals a pickled numpy array or scalar names (numpy 1 wrote numpy.core, numpy 2 numpy._core)."""
    allowed: dict[tuple[str, str], Any] = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype}
    for package in ("numpy.core", "numpy._core"):
        allowed[(f"{package}.multiarray", "_reconstruct")] = multiarray._reconstruct  # protocols 2 to 4
        allowed[(f"{package}.multiarray", "scalar")] = multiarray.scalar
        allowed[(f"{package}.numeric", "_frombuffer")] = numeric._frombuffer  # protocol 5
    return allowed


ALLOWED = _allowed()


class DataFileRefused(ValueError):
    """A data file that holds something its format does not (one line naming the file)."""


class _Forbidden(pickle.UnpicklingError):
    """A pickle names a global outside ALLOWED."""


class _Restricted(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return ALLOWED[(module, name)]
        except KeyError:
            raise _Forbidden(f"{module}.{name}"[:QUOTED]) from None


def read_pickle(path: Path) -> Any:
    """What the pickle at `path` holds, read as CIFAR's were written (latin1 strings), calling nothing but numpy's
    constructors; DataFileRefused naming the file when it names any other function or cannot be read, ValueError
    when it is larger than the memory budget (what it holds takes about its size)."""
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise DataFileRefused(f"{path}: not a readable CIFAR pickle ({type(exc).__name__})") from None
    check_bytes(f"{path}: a pickle of {human(size)}", size)
    try:
        with open(path, "rb") as f:
            return _Restricted(f, encoding="latin1").load()
    except _Forbidden as exc:
        raise DataFileRefused(f"{path}: refused: its pickle would call {exc}; a CIFAR batch holds only dicts, "
                              "lists, strings, numbers and numpy arrays (nothing in it was run)") from None
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same user-facing error
        raise DataFileRefused(f"{path}: not a readable CIFAR pickle ({type(exc).__name__})") from None


def _labels(value: Any, count: int, classes: int) -> np.ndarray | None:
    """`value` as `count` int64 labels in [0, classes), or None when it is not that."""
    if isinstance(value, list) and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
        value = np.array(value, dtype=np.int64)
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "iu" or value.shape != (count,):
        return None
    if count and (value.min() < 0 or value.max() >= classes):
        return None
    return value.astype(np.int64)


def read_batch(path: Path, key: str, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """The images (N×3×32×32 uint8) and labels (`key`: N ints in [0, classes)) of one CIFAR batch file."""
    batch = read_pickle(path)
    data = batch.get("data") if isinstance(batch, dict) else None
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != IMAGE_BYTES:
        raise DataFileRefused(f"{path}: not a CIFAR batch: 'data' must be a uint8 array of rows of {IMAGE_BYTES} "
                              "bytes")
    labels = _labels(batch.get(key), len(data), classes)
    if labels is None:
        raise DataFileRefused(f"{path}: not a CIFAR batch: '{key}' must be {len(data)} integer labels in "
                              f"[0, {classes})")
    return data.reshape(-1, 3, 32, 32), labels


def read_names(path: Path, key: str, classes: int) -> tuple[str, ...]:
    """The `classes` class names under `key` of a CIFAR meta file."""
    meta = read_pickle(path)
    names = meta.get(key) if isinstance(meta, dict) else None
    if not isinstance(names, list) or len(names) != classes or not all(isinstance(n, str) for n in names):
        raise DataFileRefused(f"{path}: not a CIFAR meta file: '{key}' must be a list of {classes} names")
    return tuple(names)
