"""Task transforms for heterogeneous multi-task runs (FedMuscle, SPEC §6), and the public-set split.

Tasks on CIFAR-10 images (any 10-class dataset works the same way):
- ``cifar10``: the 10-class labels, unchanged;
- ``cifar10-coarse``: 2 classes, vehicle (airplane, automobile, ship, truck: 0, 1, 8, 9) = 0 vs animal = 1 (on
  another dataset, the split its component declares: `Dataset.coarse_classes`);
- ``mosaic``: multi-label; each sample is a 2×2 mosaic of four images, each downsampled 2× (average of 2×2
  pixels) so the mosaic keeps the input size (32×32), with a 10-dim multi-hot target of the classes present.

:func:`make_task` turns a peer's images and labels into its task's inputs and targets; :func:`split_public`
holds out an unlabeled public part of the training set.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from p2pfl.seeding import SHARED, numpy_rng

VEHICLE_CLASSES = (0, 1, 8, 9)  # airplane, automobile, ship, truck
#: Tasks whose target is the (possibly restricted) class label; the others are cifar10-coarse and mosaic.
CLASSIFICATION_TASKS = ("cifar10", "fashion-mnist", "cifar100", "synthetic", "classify")
MULTILABEL_TASKS = ("mosaic",)


def coarse_labels(y: torch.Tensor, coarse: Sequence[int] = VEHICLE_CLASSES, num_classes: int = 10) -> torch.Tensor:
    """Labels of `num_classes` classes → 0 for the classes of `coarse` (CIFAR-10's vehicles 0, 1, 8, 9), 1 for the
    others (animals), int64."""
    first = torch.zeros(num_classes, dtype=torch.bool, device=y.device)
    first[list(coarse)] = True
    return (~first[y.long()]).long()


def make_mosaic(x: torch.Tensor, y: torch.Tensor, n: int, seed: int, peer: int = SHARED,
                purpose: str = "mosaic", num_classes: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` mosaics from images ``x`` (B×C×H×W, H and W even) with labels ``y``.

    Mosaic m takes images at indices drawn from ``numpy_rng(seed, peer, purpose)`` (uniform, with replacement)
    for its quadrants top-left, top-right, bottom-left, bottom-right, each downsampled 2× by 2×2 averaging.
    Returns the mosaics (dtype of ``x``) and multi-hot targets n×num_classes in the default float dtype; the
    drawn indices are in :func:`mosaic_indices`.
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
    target = torch.zeros(n, num_classes, device=x.device)
    target.scatter_(1, y.to(x.device).long()[idx], 1.0)
    return mosaic, target


def mosaic_indices(num_images: int, n: int, seed: int, peer: int = SHARED, purpose: str = "mosaic") -> np.ndarray:
    """The n×4 source-image indices :func:`make_mosaic` uses for the same arguments."""
    if num_images < 1:
        raise ValueError("mosaic needs at least one source image")
    return numpy_rng(seed, peer, purpose).integers(0, num_images, size=(n, 4), dtype=np.int64)


def reindex(y: torch.Tensor, labels: tuple[int, ...] | None) -> torch.Tensor:
    """Dataset labels restricted to the label set ``labels`` -> 0..L-1 in the set's order (unchanged for None)."""
    if labels is None:
        return y
    lut = torch.full((int(max(labels)) + 1,), -1, dtype=torch.int64, device=y.device)
    lut[list(labels)] = torch.arange(len(labels), device=y.device)
    return lut[y.long()]


def keep_labels(y: torch.Tensor | np.ndarray, labels: tuple[int, ...] | None) -> np.ndarray:
    """Mask of the samples whose label is in ``labels`` (all for None)."""
    yy = y.numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
    if labels is None:
        return np.ones(yy.shape[0], dtype=bool)
    return np.isin(yy, np.asarray(labels))


def task_outputs(task: str, labels: tuple[int, ...] | None, num_classes: int) -> int:
    """Logits a model of ``task`` over the label set ``labels`` of a ``num_classes`` dataset produces."""
    if task == "cifar10-coarse":
        return 2
    return len(labels) if labels is not None else num_classes


def make_task(task: str, labels: tuple[int, ...] | None, x: torch.Tensor, y: torch.Tensor, num_classes: int,
              seed: int, peer: int, purpose: str, coarse: Sequence[int] = VEHICLE_CLASSES
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Images and dataset labels (already restricted to ``labels``) -> the task's inputs and targets (`coarse`: the
    dataset's first coarse class, `Dataset.coarse_classes`). Mosaics draw their sources from
    ``numpy_rng(seed, peer, "mosaic-" + purpose)``."""
    if task in CLASSIFICATION_TASKS:
        return x, reindex(y, labels)
    if task == "cifar10-coarse":
        return x, coarse_labels(y, coarse, num_classes)
    n_out = task_outputs(task, labels, num_classes)
    return make_mosaic(x, reindex(y, labels), x.shape[0], seed, peer, "mosaic-" + purpose, num_classes=n_out)


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
