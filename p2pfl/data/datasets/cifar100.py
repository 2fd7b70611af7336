"""CIFAR-100 (Krizhevsky 2009): 32×32 colour images of 100 classes, 50 000 to train, 10 000 to test.

Looked for as torchvision's pickles ``<root>/cifar-100-python`` (read without running code:
p2pfl.data.cifar_pickle), then ``<root>/cifar100.npz`` (uint8 x_train/y_train/x_test/y_test, NHWC).
"""
from __future__ import annotations

from pathlib import Path

from p2pfl.data.datasets._base import DATASETS
from p2pfl.data.datasets._files import FileDataset, dedupe


@DATASETS.register("cifar100", aliases=("cifar-100",))
class CIFAR100(FileDataset):
    """CIFAR-100 (its 100 fine labels) from torchvision's pickles or an npz archive."""

    num_classes = 100
    hint = "put torchvision's cifar-100-python (or cifar100.npz) in DIR"
    torchvision = "CIFAR100"
    mean, std = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)

    def candidates(self) -> list[tuple[str, Path]]:
        return dedupe([("pickle100", self.root / "cifar-100-python"), ("npz", self.root / "cifar100.npz")])
