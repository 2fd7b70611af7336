"""A dataset of one's own, as a plug-in: Gaussian blobs rendered as small colour images, generated from a seed.

    python -m p2pfl.run --plugin examples/plugins/dataset.py --dataset blobs --blobs-train 512 --blobs-noise 0.1 ...

Class k of K = 4 is a bright spot at its own place on a circle around the centre of a 16×16 image; a sample is
its class's spot, moved and widened a little at random, in a random colour (the place tells the class, the colour
does not), plus pixel noise of standard deviation --blobs-noise, clipped to [0, 1]. --blobs-train images to train
on, a quarter as many to test, labels balanced and shuffled; everything is a function of the seed 0 alone (every
rank, every run, the same images). The images are float, channels last (N×H×W×C): p2pfl stores them as uint8
N×C×H×W and, since no mean/std is given, computes the normalisation from the training images.

A dataset is a class registered with ``@DATASETS.register``; its `load` returns `Arrays` (train and test images
and labels; optionally the number of classes, their names, mean/std and the manifest's entries); its `Options`
arrive as ``self.options``.
"""
from __future__ import annotations

import numpy as np

from p2pfl.data.datasets import DATASETS, Arrays, Dataset
from p2pfl.options import opt

CLASSES = 4
SIZE = 16
SEED = 0


def blobs(n: int, noise: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """n images N×H×W×3 (float32 in [0, 1]) and their labels, balanced and shuffled."""
    angle = 2 * np.pi * np.arange(CLASSES) / CLASSES
    centres = 0.5 + 0.25 * np.stack([np.cos(angle), np.sin(angle)], axis=1)  # (K, 2) in [0, 1] coordinates
    y = rng.permutation(np.arange(n) % CLASSES)
    centre = centres[y] + 0.04 * rng.standard_normal((n, 2))
    width = 0.12 * (1 + 0.2 * rng.random(n))
    colour = rng.uniform(0.4, 1.0, (n, 3))
    grid = (np.arange(SIZE) + 0.5) / SIZE
    d2 = (grid[None, :, None] - centre[:, 0, None, None]) ** 2 + (grid[None, None, :] - centre[:, 1, None, None]) ** 2
    spot = np.exp(-d2 / (2 * width[:, None, None] ** 2))  # (n, H, W)
    x = spot[..., None] * colour[:, None, None, :] + noise * rng.standard_normal((n, SIZE, SIZE, 3))
    return np.clip(x, 0.0, 1.0).astype(np.float32), y


@DATASETS.register("blobs")
class Blobs(Dataset):
    """Four classes of Gaussian spots, by place, on 16×16 colour images, generated from a fixed seed."""

    class Options:
        blobs_train: int = opt(512, "blobs: training images (a quarter as many test images)", section="data",
                               bounds=">= 8")
        blobs_noise: float = opt(0.1, "blobs: standard deviation of the pixel noise", section="data",
                                 bounds="[0, 1]")

    def load(self) -> Arrays:
        rng = np.random.default_rng(SEED)
        n_train = self.options.blobs_train
        x_train, y_train = blobs(n_train, self.options.blobs_noise, rng)
        x_test, y_test = blobs(max(1, n_train // 4), self.options.blobs_noise, rng)
        return Arrays(x_train, y_train, x_test, y_test, num_classes=CLASSES,
                      classes=("east", "north", "west", "south"),
                      extra={"seed": SEED, "noise": self.options.blobs_noise})
