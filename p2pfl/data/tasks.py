"""Task transforms for heterogeneous multi-task runs (FedMuscle, SPEC §6), and the public-set split.

Tasks on CIFAR-10 images (any 10-class dataset works the same way):
- ``cifar10``: the 10-class labels, unchanged;
- ``cifar10-coarse``: 2 classes, vehicle (airplane, automobile, ship, truck: 0, 1, 8, 9) = 0 vs animal = 1;
- ``mosaic``: multi-label; each sample is a 2×2 mosaic of four images, each downsampled 2× (average of 2×2
  pixels) so the mosaic keeps the input size (32×32), with a 10-dim multi-hot target of the classes present.

:func:`transform_task` turns a peer's shard into its task; :func:`apply_task` turns a whole dataset (train and
test, shared streams so every peer of a task sees the same test set). :func:`split_public` holds out an unlabeled
public part of the training set; partition the private part and map back: ``[private[p] for p in parts]``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.nn.functional as F

from p2pfl.seeding import SHARED, numpy_rng

TASKS = ("cifar10", "cifar10-coarse", "mosaic")
VEHICLE_CLASSES = (0, 1, 8, 9)  # airplane, automobile, ship, truck


@dataclass(frozen=True)
class TaskInfo:
    """What a task's model must output: ``num_outputs`` logits, multi-label (BCE) or single-label (CE)."""

    name: str
    num_outputs: int
    multilabel: bool
    classes: tuple[str, ...]


def _canonical(task: str) -> str:
    key = str(task).strip().lower().replace("_", "-")
    if key not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    return key


def task_info(task: str, base_classes: tuple[str, ...] | None = None) -> TaskInfo:
    """Output size, loss kind and class names of ``task``."""
    task = _canonical(task)
    base = tuple(base_classes) if base_classes else tuple(f"class{k}" for k in range(10))
    if task == "cifar10-coarse":
        return TaskInfo(task, 2, False, ("vehicle", "animal"))
    return TaskInfo(task, 10, task == "mosaic", base)


def coarse_labels(y: torch.Tensor) -> torch.Tensor:
    """CIFAR-10 labels → 0 for vehicles (0, 1, 8, 9), 1 for animals (int64)."""
    vehicle = torch.zeros(10, dtype=torch.bool, device=y.device)
    vehicle[list(VEHICLE_CLASSES)] = True
    return (~vehicle[y.long()]).long()


def make_mosaic(x: torch.Tensor, y: torch.Tensor, n: int, seed: int, peer: int = SHARED,
                purpose: str = "mosaic", num_classes: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` mosaics from images ``x`` (B×C×H×W, H and W even) with labels ``y``.

    Mosaic m takes images at indices drawn from ``numpy_rng(seed, peer, purpose)`` (uniform, with replacement)
    for its quadrants top-left, top-right, bottom-left, bottom-right, each downsampled 2× by 2×2 averaging.
    Returns the mosaics (dtype of ``x``) and float32 multi-hot targets n×num_classes; the drawn indices are
    in :func:`mosaic_indices`.
    """
    idx = torch.as_tensor(mosaic_indices(x.shape[0], n, seed, peer, purpose), device=x.device)
    b, c, h, w = x.shape
    if h % 2 or w % 2:
        raise ValueError(f"mosaic needs even image sizes, got {h}×{w}")
    small = F.avg_pool2d(x[idx.flatten()].float(), 2).view(n, 4, c, h // 2, w // 2)
    top = torch.cat([small[:, 0], small[:, 1]], dim=3)
    bottom = torch.cat([small[:, 2], small[:, 3]], dim=3)
    mosaic = torch.cat([top, bottom], dim=2)
    if x.dtype == torch.uint8:
        mosaic = mosaic.round_().clamp_(0, 255).to(torch.uint8)
    else:
        mosaic = mosaic.to(x.dtype)
    target = torch.zeros(n, num_classes, dtype=torch.float32, device=x.device)
    target.scatter_(1, y.to(x.device).long()[idx], 1.0)
    return mosaic, target


def mosaic_indices(num_images: int, n: int, seed: int, peer: int = SHARED, purpose: str = "mosaic") -> np.ndarray:
    """The n×4 source-image indices :func:`make_mosaic` uses for the same arguments."""
    if num_images < 1:
        raise ValueError("mosaic needs at least one source image")
    return numpy_rng(seed, peer, purpose).integers(0, num_images, size=(n, 4), dtype=np.int64)


def transform_task(task: str, x: torch.Tensor, y: torch.Tensor, seed: int, peer: int = SHARED,
                   purpose: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
    """A peer's images and 10-class labels turned into ``task``'s inputs and targets (as many samples as given;
    mosaics are drawn from ``numpy_rng(seed, peer, "mosaic-" + purpose)``)."""
    task = _canonical(task)
    if task == "cifar10":
        return x, y
    if task == "cifar10-coarse":
        return x, coarse_labels(y)
    return make_mosaic(x, y, x.shape[0], seed, peer, "mosaic-" + purpose)


def apply_task(dataset, task: str, seed: int):
    """A copy of an :class:`~p2pfl.data.datasets.ImageDataset` (10 classes) with train and test transformed to
    ``task`` using shared streams (peer = SHARED), so that every peer of the task sees the same data."""
    task = _canonical(task)
    if dataset.num_classes != 10:
        raise ValueError(f"task {task!r} needs a 10-class dataset, {dataset.name!r} has {dataset.num_classes}")
    info = task_info(task, dataset.classes)
    x_train, y_train = transform_task(task, dataset.x_train, dataset.y_train, seed, SHARED, "train")
    x_test, y_test = transform_task(task, dataset.x_test, dataset.y_test, seed, SHARED, "test")
    return replace(dataset, name=f"{dataset.name}:{task}", x_train=x_train, y_train=y_train, x_test=x_test,
                   y_test=y_test, num_classes=info.num_outputs, classes=info.classes, multilabel=info.multilabel,
                   extra={**dataset.extra, "task": task})


def split_public(dataset, public_size: int | float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Hold out an unlabeled public part of the training set: returns (private indices, public indices), both
    sorted. ``dataset`` is an ImageDataset, a label vector or the number of training samples; ``public_size``
    a count or a fraction in (0, 1). Drawn from ``numpy_rng(seed, SHARED, "public-split")``."""
    if isinstance(dataset, (int, np.integer)):
        n = int(dataset)
    elif hasattr(dataset, "x_train"):
        n = int(dataset.x_train.shape[0])
    else:
        n = len(dataset)
    if isinstance(public_size, float) and 0 < public_size < 1:
        size = int(round(public_size * n))
    else:
        size = int(public_size)
        if size != public_size:
            raise ValueError(f"public_size must be a count or a fraction in (0, 1), got {public_size}")
    if not 0 < size < n:
        raise ValueError(f"public_size must leave both parts non-empty (0 < size < {n}), got {public_size}")
    perm = numpy_rng(seed, SHARED, "public-split").permutation(n)
    return np.sort(perm[size:]), np.sort(perm[:size])
