"""CIFAR-10 (Krizhevsky 2009): 32×32 colour images of 10 classes, 50 000 to train, 10 000 to test.

Looked for as torchvision's pickles ``<root>/cifar-10-batches-py`` (read without running code:
p2pfl.data.cifar_pickle), ``<root>/cifar10.npz`` (uint8 x_train/y_train/x_test/y_test, NHWC), the decoded cache
``~/.cache/p2pfl/cifar10.npz``, and the JPEG archive ``cifar10-jpeg.npz`` in the root or in ``../shared/data`` next
to the project, decoded once by one rank per node and cached as ``<root>/cifar10.npz`` (or in ``~/.cache/p2pfl``
when the root is read-only).
"""
from __future__ import annotations

from pathlib import Path

from p2pfl.data.datasets import _files
from p2pfl.data.datasets._base import DATASETS
from p2pfl.data.datasets._files import CIFAR10_CLASSES, FileDataset


@DATASETS.register("cifar10", aliases=("cifar-10",))
class CIFAR10(FileDataset):
    """CIFAR-10 from torchvision's pickles, an npz archive or the shared JPEG archive."""

    default_classes = CIFAR10_CLASSES
    hint = ("decode the shared archive with `python ../shared/data/cifar10_jpeg.py npz DIR/cifar10.npz`, "
            "or put torchvision's cifar-10-batches-py in DIR")
    torchvision = "CIFAR10"
    mean, std = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
    coarse_classes = (0, 1, 8, 9)  # airplane, automobile, ship, truck: vehicles vs animals

    def candidates(self) -> list[tuple[str, Path]]:
        root = self.root
        out = [("pickle10", root / "cifar-10-batches-py"), ("npz", root / "cifar10.npz"),
               ("npz", _files.default_cache() / "cifar10.npz"), ("jpeg-npz", root / "cifar10-jpeg.npz")]
        for d in _files.shared_data_dirs():
            out += [("npz", d / "cifar10.npz"), ("jpeg-npz", d / "cifar10-jpeg.npz")]
        return _files.dedupe(out)
