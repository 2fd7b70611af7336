"""A small seeded image set a model can learn, generated, never read: each class has a smooth random colour
pattern; a sample is its class pattern at a random contrast and brightness plus pixel noise. Labels are shuffled
and balanced (to within one) in both the train and the test split; the normalisation is the training images' own.
"""
from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F

from p2pfl.data.datasets._base import DATASETS, STAND_IN, Arrays, Dataset
from p2pfl.seeding import SHARED, torch_generator


def synthetic_arrays(num_train: int = 2000, num_test: int = 500, num_classes: int = 10, channels: int = 3,
                     image_size: int = 32, seed: int = 0, noise: float = 0.1) -> Arrays:
    """The synthetic set's arrays (uint8 images N×C×H×W) for these parameters."""
    if min(num_train, num_test) < 1 or num_classes < 2 or channels not in (1, 3) or image_size < 4:
        raise ValueError("synthetic dataset needs num_train, num_test >= 1, num_classes >= 2, channels 1 or 3 "
                         "and image_size >= 4")
    g = torch_generator(seed, SHARED, "synthetic")
    n = num_train + num_test
    coarse = torch.randn(num_classes, channels, 4, 4, generator=g, dtype=torch.float64)
    templates = F.interpolate(coarse, size=(image_size, image_size), mode="bicubic", align_corners=False)
    templates = templates / templates.flatten(1).std(dim=1).view(-1, 1, 1, 1)
    y = torch.cat([(torch.arange(m) % num_classes)[torch.randperm(m, generator=g)] for m in (num_train, num_test)])
    contrast = 0.7 + 0.6 * torch.rand(n, 1, 1, 1, generator=g, dtype=torch.float64)
    brightness = 0.05 * torch.randn(n, 1, 1, 1, generator=g, dtype=torch.float64)
    pixel_noise = noise * torch.randn(n, channels, image_size, image_size, generator=g,
                                      dtype=torch.float64)
    x = 0.5 + 0.18 * contrast * templates[y] + brightness + pixel_noise
    x = (x.clamp(0, 1) * 255).round().to(torch.uint8)
    return Arrays(x_train=x[:num_train].contiguous(), y_train=y[:num_train].clone(),
                  x_test=x[num_train:].contiguous(), y_test=y[num_train:].clone(), num_classes=num_classes,
                  classes=tuple(f"class{k}" for k in range(num_classes)), extra={"seed": seed, "noise": noise})


@DATASETS.register("synthetic")
class Synthetic(Dataset):
    """Generated from a seed (its keywords: those of `synthetic_arrays`; a run uses the defaults)."""

    num_classes = 10
    coarse_classes = (0, 1, 8, 9)  # CIFAR-10's split, so tests run cifar10-coarse on it
    capabilities = frozenset({STAND_IN})
    load_options = tuple(inspect.signature(synthetic_arrays).parameters)

    def load(self, **options: object) -> Arrays:
        return synthetic_arrays(**options)
