"""--validation F: a held-out split carved from the training data, scored on instead of the test set.

A tuning run must choose its options without reading the test set, else the test score of the chosen values is
optimistic. The held-out images are a seeded draw of round(F·N) training images, stratified by label (each class
gives its share, the remainder going to the classes with the largest fractional shares, ties to the lower label),
from the stream (seed, SHARED, "validation/<dataset>"). They leave the training data, so no peer trains on them,
and take the place of the test split in the dataset, whose test images and labels are dropped before anything
reads them."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from p2pfl.seeding import SHARED, numpy_rng


def held_out(labels: np.ndarray, fraction: float, seed: int, purpose: str) -> np.ndarray:
    """The indices (ascending) of the round(fraction·N) held-out images, stratified by label (module docstring)."""
    n = labels.size
    total = min(n - 1, int(round(fraction * n)))
    classes, counts = np.unique(labels, return_counts=True)
    share = counts * (total / n) if n else counts * 0.0
    take = np.floor(share).astype(np.int64)
    order = sorted(range(classes.size), key=lambda c: (-(share[c] - take[c]), classes[c]))
    for c in order[:total - int(take.sum())]:
        take[c] += 1
    rng = numpy_rng(seed, SHARED, purpose)
    chosen = [rng.choice(np.flatnonzero(labels == c), size=int(k), replace=False)
              for c, k in zip(classes, take) if k > 0]
    return np.sort(np.concatenate(chosen)) if chosen else np.empty(0, dtype=np.int64)


def carve(dataset: Any, fraction: float, seed: int) -> dict[str, Any]:
    """Move the held-out images of `dataset` (an ImageDataset) from its training split into its test split, in
    place, dropping the test split; returns manifest["dataset"]'s record of it."""
    labels = dataset.y_train.numpy()
    index = held_out(labels, fraction, seed, f"validation/{dataset.name}")
    if index.size == 0:
        raise ValueError(f"--validation {fraction}: holds out no image of {labels.size} (raise it or use more data)")
    keep = np.setdiff1d(np.arange(labels.size), index, assume_unique=True)
    out, stay = torch.as_tensor(index), torch.as_tensor(keep)
    dataset.x_test, dataset.y_test = dataset.x_train[out], dataset.y_train[out]
    dataset.x_train, dataset.y_train = dataset.x_train[stay], dataset.y_train[stay]
    if dataset.groups is not None:
        dataset.groups = dataset.groups[stay]
    return {"scored_on": "validation", "validation": int(index.size), "validation_fraction": fraction,
            "validation_stream": f"(seed, SHARED, 'validation/{dataset.name}')"}


__all__ = ["carve", "held_out"]
