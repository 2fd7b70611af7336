"""Fashion-MNIST (Xiao et al. 2017): 28×28 gray images of 10 kinds of clothing, 60 000 to train, 10 000 to test.

Looked for as the original ``*-idx?-ubyte[.gz]`` files in ``<root>/FashionMNIST/raw`` (torchvision's layout),
``<root>/fashion-mnist``, ``<root>`` itself, then Debian's ``/usr/share/datasets/fashion-mnist``
(``apt-get install dataset-fashion-mnist``).
"""
from __future__ import annotations

from pathlib import Path

from p2pfl.data.datasets._base import DATASETS
from p2pfl.data.datasets._files import FileDataset

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")

FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
                         "Bag", "Ankle boot")


@DATASETS.register("fashion-mnist", aliases=("fashionmnist", "fmnist"))
class FashionMNIST(FileDataset):
    """Fashion-MNIST from its idx files."""

    default_classes = FASHION_MNIST_CLASSES
    hint = "apt-get install dataset-fashion-mnist (files in /usr/share/datasets/fashion-mnist)"
    torchvision = "FashionMNIST"
    mean, std = (0.2860,), (0.3530,)

    def candidates(self) -> list[tuple[str, Path]]:
        root = self.root
        return [("idx", d) for d in (root / "FashionMNIST" / "raw", root / "fashion-mnist", root,
                                     DEBIAN_FASHION_MNIST)]
