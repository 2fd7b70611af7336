"""Image datasets as registered components (--dataset), held as uint8 tensors N×C×H×W.

Each dataset is one file of this package registered in `DATASETS` (a researcher's from their own file, the same
way: p2pfl.data.datasets._base says what a dataset gives); `load_dataset` turns what its `load` gives into an
`ImageDataset`: images N×C×H×W as uint8 (float images in [0, 1] rounded), int64 labels, the number of classes,
their names, and the per-channel mean/std (the training images' own when the dataset gives none).

Built-ins: fashion-mnist, cifar10, cifar100 (files found on disk without network access, p2pfl.data.datasets._files;
each file says where it looks) and synthetic (generated from a seed). Nothing is downloaded unless asked
(``allow_download=True``); in a multi-process run only node leaders prepare a dataset, through
:func:`ensure_dataset`, while the other ranks wait on a barrier.
"""
from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from p2pfl.capabilities import FEATURES, SEQUENCE_LABELS, TOKENS
from p2pfl.data.augment import ImageTransform
from p2pfl.data.datasets._base import DATASETS, MAX_CLASSES, STAND_IN, Arrays, Dataset, ImageDataset
from p2pfl.data.datasets._files import CIFAR10_CLASSES, DatasetNotFound, data_root
from p2pfl.registry import options_of
from p2pfl.suggest import value_hint


def canonical_name(name: str) -> str:
    """The registered name of dataset ``name`` (case, aliases and '_' / '-' insensitive); ValueError if unknown."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}{value_hint(str(name), DATASETS.choices()) or ';'} choose one of "
                         f"{', '.join(DATASETS)}")
    return DATASETS.resolve(name)


def ensure_dataset(name: str, data_dir: str | os.PathLike | None = None, allow_download: bool = False,
                   barrier: Callable[[], None] | None = None, is_node_leader: bool = True, cfg: Any = None) -> None:
    """Make ``name`` loadable on this node before every rank calls :func:`load_dataset`.

    Node leaders run the dataset's `prepare` (find the files, decode and cache an archive, download when missing
    and ``allow_download`` is set); the other ranks only wait on ``barrier``, which every rank calls (the leader
    too, even when it fails, so nobody hangs). Raises the leader's error there. A dataset with nothing to prepare
    (a generated one) waits for nobody.
    """
    cls = DATASETS.get(canonical_name(name))
    if not cls.prepares():
        return
    error: Exception | None = None
    if is_node_leader:
        try:
            cls(options_of(cls, cfg), data_root(data_dir), allow_download).prepare()
        except Exception as e:  # reach the barrier first, then raise
            error = e
    if barrier is not None:
        barrier()
    if error is not None:
        raise error


def load_dataset(name: str, data_dir: str | os.PathLike | None = None, allow_download: bool = False,
                 cfg: Any = None, **options: Any) -> ImageDataset:
    """Load dataset ``name`` as uint8 tensors; its `Options` as the run's configuration ``cfg`` holds them (their
    defaults without one), ``options`` the keywords of its `load` (the synthetic set's: `synthetic_arrays`'s).

    Images carry the dataset's `transform` (flip, padding fill), in the manifest's record as `augment` where it
    is not the default. Raises :class:`DatasetNotFound` (one line: where it looked and how to provide the data)
    when a file dataset is absent and downloading is off, ValueError (one line) when what the dataset gives is not
    a dataset.
    """
    cls = DATASETS.get(canonical_name(name))
    if options and not _takes(cls, options):
        takers = [n for n in DATASETS if _takes(DATASETS.get(n), options)]
        where = f"the {' and '.join(takers)} dataset{'s' if len(takers) > 1 else ''} only" if takers else "no dataset"
        raise ValueError(f"options {sorted(options)} apply to {where}, not {cls.name!r}")
    dataset = cls(options_of(cls, cfg), data_root(data_dir), allow_download)
    out = assemble(cls.name, dataset.load(**options), features=FEATURES in cls.capabilities,
                   tokens=TOKENS in cls.capabilities, sequence_labels=SEQUENCE_LABELS in cls.capabilities)
    transform = dataset.transform()
    if not cls.capabilities & {FEATURES, TOKENS, SEQUENCE_LABELS} and transform != ImageTransform():
        out.transform = transform  # recorded where it departs from the default, so other records stay as they were
        out.extra["augment"] = transform.record()
    return out


def _takes(cls: type[Dataset], options: dict[str, Any]) -> bool:
    """Whether the dataset's `load` accepts these keywords."""
    params = inspect.signature(cls.load).parameters.values()
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return any(p.kind is p.VAR_KEYWORD for p in params) or set(options) <= named - {"self"}


def synthetic_dataset(**options: Any) -> ImageDataset:
    """The synthetic set (its keywords: those of p2pfl.data.datasets.synthetic.synthetic_arrays)."""
    return load_dataset("synthetic", **options)


# --------------------------------------------------------------------------------------------------- assembling

def assemble(name: str, arrays: Arrays, features: bool = False, tokens: bool = False,
             sequence_labels: bool = False) -> ImageDataset:
    """The ImageDataset of what dataset ``name``'s `load` gave, checked (a ValueError of one line naming the
    dataset and what is wrong); with `features` (a dataset declaring FEATURES) feature vectors, with `tokens`
    (TOKENS) token sequences, with `sequence_labels` (SEQUENCE_LABELS) token sequences of a vocabulary of their
    own with one label each, not images."""
    def fail(message: str) -> ValueError:
        return ValueError(f"--dataset {name}: {message}")

    if not isinstance(arrays, Arrays):
        raise fail(f"load() must return p2pfl.data.datasets.Arrays, got {type(arrays).__name__}")
    read = _tokens if tokens or sequence_labels else _features if features else _images
    x_train, x_test = read(arrays.x_train, "x_train", fail), read(arrays.x_test, "x_test", fail)
    if x_train.shape[1:] != x_test.shape[1:]:
        what = "token sequences" if tokens or sequence_labels else "feature vectors" if features else "images"
        raise fail(f"train {what} are {tuple(x_train.shape[1:])}, test {what} {tuple(x_test.shape[1:])}")
    y_train, y_test = _labels(arrays.y_train, "y_train", len(x_train), fail), _labels(arrays.y_test, "y_test",
                                                                                    len(x_test), fail)
    top = int(max(y_train.max(initial=0), y_test.max(initial=0)))
    num_classes = top + 1 if arrays.num_classes is None else int(arrays.num_classes)
    if num_classes > MAX_CLASSES:
        raise fail(f"{num_classes} classes (labels reach {top}), over the limit of {MAX_CLASSES}: number the "
                   f"{len(np.union1d(y_train, y_test))} distinct labels 0, 1, ...")
    low = int(min(y_train.min(initial=0), y_test.min(initial=0)))
    if low < 0 or top >= num_classes or num_classes < 1:
        raise fail(f"labels must lie in [0, {num_classes}), found [{low}, {top}]")
    if tokens and not all(0 <= int(x.min()) and int(x.max()) < num_classes for x in (x_train, x_test)):
        raise fail(f"token ids must lie in [0, {num_classes}) (the vocabulary is the classes)")
    vocabulary = tuple(str(v) for v in arrays.vocabulary) if sequence_labels and arrays.vocabulary else ()
    if sequence_labels:
        v = len(vocabulary)
        if not all(v and 0 <= int(x.min()) and int(x.max()) < v for x in (x_train, x_test)):
            raise fail(f"token ids must lie in [0, {v}) (the vocabulary's size)")
        if arrays.padding is None or not 0 <= int(arrays.padding) < v:
            raise fail(f"the padding id must be a token id in [0, {v}), got {arrays.padding}")
    channels = int(x_train.shape[1])
    if tokens or sequence_labels:
        mean, std = (0.0,), (1.0,)  # token ids reach the model as they are
        channels = 1
    else:
        mean, std = _normalisation(arrays, x_train, fail) if not features else _identity(arrays, channels)
    if len(mean) != channels or len(std) != channels or min(std) <= 0:
        raise fail(f"mean and std must give one value per channel ({channels}), std > 0")
    classes = tuple(str(c) for c in arrays.classes) if arrays.classes else tuple(map(str, range(num_classes)))
    groups = None if arrays.groups is None else torch.from_numpy(
        _labels(arrays.groups, "groups", len(x_train), fail))
    return ImageDataset(name=name, x_train=x_train, y_train=torch.from_numpy(y_train),
                        x_test=x_test, y_test=torch.from_numpy(y_test), num_classes=num_classes, classes=classes,
                        mean=mean, std=std, extra=dict(arrays.extra), groups=groups, vocabulary=vocabulary,
                        padding=int(arrays.padding) if sequence_labels else None)


def _as_tensor(x: Any) -> torch.Tensor:
    """An array (numpy, torch or nested lists) as a tensor, numpy's without a copy when contiguous."""
    return torch.from_numpy(np.ascontiguousarray(x)) if isinstance(x, np.ndarray) else torch.as_tensor(x)


def _images(x: Any, what: str, fail: Callable[[str], ValueError]) -> torch.Tensor:
    """Images as a contiguous uint8 tensor N×C×H×W."""
    t = _as_tensor(x)
    if t.dim() == 3:
        t = t[:, None]
    if t.dim() != 4:
        raise fail(f"{what} must be images N×C×H×W, N×H×W×C or N×H×W, got shape {tuple(t.shape)}")
    if t.shape[1] not in (1, 3, 4) and t.shape[3] in (1, 3, 4):
        t = t.permute(0, 3, 1, 2)
    if t.shape[1] not in (1, 3, 4) or t.shape[2] != t.shape[3] or t.shape[0] < 1:
        raise fail(f"{what} must be square images with 1, 3 or 4 channels, got shape {tuple(t.shape)}")
    if t.is_floating_point():
        low, high = float(t.min()), float(t.max())
        if not 0.0 <= low <= high <= 1.0:
            raise fail(f"float images must lie in [0, 1], {what} holds [{low:g}, {high:g}]")
        t = (t.double() * 255).round().to(torch.uint8)
    elif t.dtype != torch.uint8:
        raise fail(f"{what} must be uint8 or float in [0, 1], got {t.dtype}")
    return t.contiguous()


def _features(x: Any, what: str, fail: Callable[[str], ValueError]) -> torch.Tensor:
    """Feature vectors as a contiguous float32 tensor N×F, finite."""
    t = _as_tensor(x)
    if t.dim() != 2 or t.shape[0] < 1 or t.shape[1] < 1:
        raise fail(f"{what} must be feature vectors N×F, got shape {tuple(t.shape)}")
    if t.dtype == torch.bool or t.is_complex():
        raise fail(f"{what} must be numbers (float32 features), got {t.dtype}")
    t = t.to(torch.float32)
    if not bool(torch.isfinite(t).all()):
        raise fail(f"{what} holds NaN or infinite values")
    return t.contiguous()


def _tokens(x: Any, what: str, fail: Callable[[str], ValueError]) -> torch.Tensor:
    """Token sequences as a contiguous int64 tensor N×T (T >= 2: position t predicts token t+1)."""
    t = _as_tensor(x)
    if t.dim() != 2 or t.shape[0] < 1 or t.shape[1] < 2:
        raise fail(f"{what} must be token sequences N×T (T >= 2), got shape {tuple(t.shape)}")
    if t.dtype == torch.bool or t.is_floating_point() or t.is_complex():
        raise fail(f"{what} must be integer token ids, got {t.dtype}")
    return t.to(torch.int64).contiguous()


def _identity(arrays: Arrays, features: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The normalisation of feature vectors: the dataset's, else 0 and 1 per feature (they reach the model as the
    dataset gives them, standardised by it)."""
    if arrays.mean is not None and arrays.std is not None:
        return tuple(float(v) for v in arrays.mean), tuple(float(v) for v in arrays.std)
    return (0.0,) * features, (1.0,) * features


def _labels(y: Any, what: str, n: int, fail: Callable[[str], ValueError]) -> np.ndarray:
    """Labels as int64, one per image."""
    a = np.asarray(y.cpu() if isinstance(y, torch.Tensor) else y)
    if a.shape != (n,) or not np.issubdtype(a.dtype, np.integer):
        raise fail(f"{what} must be {n} integer labels, got {a.dtype} of shape {a.shape}")
    return a.astype(np.int64)


def _normalisation(arrays: Arrays, x_train: torch.Tensor,
                   fail: Callable[[str], ValueError]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(mean, std) per channel: the dataset's, else the training images' own in [0, 1] units (float64; the
    unbiased std)."""
    if (arrays.mean is None) != (arrays.std is None):
        raise fail("give both mean and std, or neither (then they are computed from the training images)")
    if arrays.mean is not None:
        return tuple(float(v) for v in arrays.mean), tuple(float(v) for v in arrays.std)
    xf = x_train.double() / 255
    return tuple(float(v) for v in xf.mean(dim=(0, 2, 3))), tuple(float(v) for v in xf.std(dim=(0, 2, 3)))


__all__ = [
    "Arrays", "CIFAR10_CLASSES", "DATASETS", "STAND_IN", "Dataset", "DatasetNotFound", "ImageDataset", "assemble",
    "canonical_name", "data_root", "ensure_dataset", "load_dataset", "synthetic_dataset",
]
