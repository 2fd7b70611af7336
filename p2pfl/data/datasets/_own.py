"""What the datasets read from a researcher's own files share (``npz:PATH``, ``folder:PATH``, ``csv:PATH``,
LEAF's ``leaf:PATH``, ``femnist:PATH`` and ``sent140:PATH``, ``hf:PATH``): their options, the checks of the arrays
they read, the held-out test split, and the manifest's entries (source, digest, statistics).

Images arrive as numpy arrays N×H×W (grey), N×H×W×C or N×C×H×W, uint8 or float in [0, 1]; the layout is told
apart by squareness: N×C×H×W when axes 2 and 3 are equal and axis 1 has 1, 3 or 4 entries, else N×H×W×C when
axes 1 and 2 are equal and axis 3 has 1, 3 or 4 entries (only 1×1, 3×3 or 4×4 images could be read both ways;
they are read as N×C×H×W). Labels are integers >= 0; the classes are counted from them (the largest label plus
one) unless the file names them. Every error is one line naming the dataset's file and what is wrong.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from p2pfl.data.datasets._base import Arrays, Dataset
from p2pfl.options import Check, method_options, opt
from topologies.streams import MAX_SEED, SHARED, numpy_rng

CHANNELS = (1, 3, 4)


@method_options("dataset: npz, folder, csv, leaf, femnist, sent140")
class OwnFilesOptions:
    """The options of the datasets read from one's own files."""

    test_split: float | None = opt(None, "a dataset of one's own files without a test set of its own (npz:, folder:, "
                                         "csv:, leaf:, femnist:, sent140:, hf:): the fraction of the samples held out "
                                         "to test (drawn by --split-seed)", section="data", bounds="(0, 1)")
    split_seed: int = opt(0, "seed of --test-split's draw (fixed by default: the same test samples for every --seed, "
                             "as a file's own test set is)", section="data", bounds=f"[0, {MAX_SEED}]")
    image_size: int = opt(32, "folder:/hf: the side every image is resized to (square)", section="data",
                          bounds=">= 4 pixels")
    label_column: str | None = opt(None, "csv: the column holding the labels (default: the last)", section="data")
    natural_column: str | None = opt(None, "csv: the column whose values are the rows' natural groups (a writer, a "
                                           "hospital) for --partition natural; it is no feature", section="data")
    impute: str = opt("none", "csv: a missing feature value is refused (none) or takes the training rows' mean, a "
                              "missing category no one-hot entry (mean)", ("none", "mean"), section="data")
    max_length: int = opt(80, "sent140: the characters of a text kept: a longer one is cut, a shorter one padded",
                          section="data", bounds=">= 2")


class OwnFiles(Dataset):
    """A dataset named with the path of its files (``name:PATH``, the registry's argument)."""

    Options = OwnFilesOptions
    #: The PATH of ``name:PATH`` (set on the class `DATASETS.get` returns for it).
    argument: ClassVar[str | None] = None
    #: What PATH must be: "file" or "folder".
    what: ClassVar[str] = "file"
    #: What a test set of its own is, in messages.
    test_set: ClassVar[str] = "x_test, y_test"

    @classmethod
    def located(cls) -> Path:
        """The PATH, as given (relative to the working directory)."""
        if not cls.argument:
            raise ValueError(f"--dataset {cls.name}: name the {cls.what}, {cls.name}:PATH")
        return Path(cls.argument).expanduser()

    @classmethod
    def present(cls, path: Path) -> bool:
        """Whether PATH is what the format reads (a file; a folder for folder:)."""
        return path.is_file()

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        """PATH exists; --test-split given exactly when the files hold no test set."""
        super().check(cfg, check)
        path = cls.located()
        check(cls.present(path), "dataset", f"{cls.name}:{cls.argument}: no such {cls.what}")
        if cls.present(path):
            split, own = getattr(cfg, "test_split", None), cls.has_test(path)
            check(split is None or not own, "test_split",
                  f"{cls.name}:{cls.argument} holds a test set of its own; leave --test-split unset")
            check(split is not None or own, "test_split",
                  f"{cls.name}:{cls.argument} holds no test set ({cls.test_set}): give --test-split FRACTION")

    @classmethod
    def has_test(cls, path: Path) -> bool:
        """Whether the files hold a test set of their own (then --test-split is refused)."""
        return False

    def fail(self, message: str) -> ValueError:
        """The one-line error naming the dataset's file."""
        return ValueError(f"--dataset {self.name}:{self.argument}: {message}")

    def arrays(self, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray | None,
               y_test: np.ndarray | None, classes: tuple[str, ...] | None = None) -> Arrays:
        """The checked `Arrays` of what was read: uint8 N×C×H×W images, int64 labels, the test set held out by
        --test-split when the files have none, the normalisation and digest of the data as the run holds it."""
        if (x_test is None) != (y_test is None):
            raise self.fail("give both x_test and y_test, or neither (then --test-split FRACTION)")
        x_train, y_train = self.images(x_train, "x_train"), self.labels(y_train, "y_train", len(x_train))
        split = self.options.test_split
        extra: dict[str, Any] = {"source": str(self.located().resolve())}
        if x_test is None:
            if split is None:
                raise self.fail(f"holds no test set ({self.test_set}): give --test-split FRACTION")
            x_train, y_train, x_test, y_test = self.split(x_train, y_train, split)
            extra.update(test_split=split, split_seed=self.options.split_seed)
        elif split is not None:
            raise self.fail("holds a test set of its own; leave --test-split unset")
        else:
            x_test, y_test = self.images(x_test, "x_test"), self.labels(y_test, "y_test", len(x_test))
        if x_train.shape[1:] != x_test.shape[1:]:
            raise self.fail(f"train images are {tuple(x_train.shape[1:])}, test images {tuple(x_test.shape[1:])}")
        top = int(max(y_train.max(), y_test.max()))
        if classes is not None and top >= len(classes):
            raise self.fail(f"labels reach {top} but {len(classes)} classes are named")
        xf = x_train.double() / 255  # as p2pfl.data.datasets.assemble computes it, recorded in the manifest
        mean = tuple(float(v) for v in xf.mean(dim=(0, 2, 3)))
        std = tuple(float(v) for v in xf.std(dim=(0, 2, 3))) if len(x_train) > 1 else (1.0,) * x_train.shape[1]
        extra.update(digest=digest(x_train, y_train, x_test, y_test), mean=list(mean), std=list(std))
        return Arrays(x_train, torch.from_numpy(y_train), x_test, torch.from_numpy(y_test),
                      num_classes=len(classes) if classes is not None else top + 1, classes=classes, mean=mean,
                      std=std, extra=extra)

    def images(self, x: np.ndarray, what: str) -> torch.Tensor:
        """Images as a uint8 tensor N×C×H×W (float in [0, 1] scaled by 255 and rounded, half to even)."""
        if x.ndim == 3:
            x = x[:, None]
        if x.ndim != 4 or len(x) < 1:
            raise self.fail(f"{what} must be images N×H×W, N×H×W×C or N×C×H×W, got shape {x.shape}")
        if x.shape[2] == x.shape[3] and x.shape[1] in CHANNELS:
            pass
        elif x.shape[1] == x.shape[2] and x.shape[3] in CHANNELS:
            x = x.transpose(0, 3, 1, 2)
        else:
            raise self.fail(f"{what} must be square images with 1, 3 or 4 channels, got shape {x.shape}")
        if np.issubdtype(x.dtype, np.floating):
            if not np.isfinite(x).all():
                raise self.fail(f"{what} holds NaN or infinite values")
            low, high = float(x.min()), float(x.max())
            if not 0.0 <= low <= high <= 1.0:
                raise self.fail(f"float images must lie in [0, 1], {what} holds [{low:g}, {high:g}]")
            return (torch.from_numpy(np.ascontiguousarray(x)).double() * 255).round().to(torch.uint8).contiguous()
        if x.dtype != np.uint8:
            raise self.fail(f"{what} must be uint8 or float in [0, 1], got {x.dtype}")
        return torch.from_numpy(np.ascontiguousarray(x))

    def labels(self, y: np.ndarray, what: str, n: int) -> np.ndarray:
        """Labels as int64, one per image, >= 0."""
        if y.dtype == np.bool_ or not np.issubdtype(y.dtype, np.integer):
            raise self.fail(f"{what} must be integer labels, got {y.dtype}")
        if y.shape != (n,):
            raise self.fail(f"{what} must hold one label per image ({n}), got shape {y.shape}")
        if y.min() < 0:
            raise self.fail(f"{what} holds negative labels ({int(y.min())})")
        return y.astype(np.int64)

    def split(self, x: torch.Tensor, y: np.ndarray, fraction: float
              ) -> tuple[torch.Tensor, np.ndarray, torch.Tensor, np.ndarray]:
        """Hold round(fraction N) images out to test, drawn from the stream (--split-seed, SHARED, "test-split");
        both sets keep the files' order."""
        n = len(y)
        n_test = round(fraction * n)
        if not 1 <= n_test < n:
            raise self.fail(f"--test-split {fraction:g} of {n} images leaves no train or no test image")
        held = np.zeros(n, dtype=bool)
        held[numpy_rng(self.options.split_seed, SHARED, "test-split").permutation(n)[:n_test]] = True
        test, train = torch.from_numpy(np.flatnonzero(held)), torch.from_numpy(np.flatnonzero(~held))
        return x[train].contiguous(), y[~held], x[test].contiguous(), y[held]


def digest(*arrays: torch.Tensor | np.ndarray) -> str:
    """SHA-256 of the arrays' dtypes, shapes and bytes (the data as the run holds it): "sha256:<hex>"."""
    h = hashlib.sha256()
    for a in arrays:
        a = a.numpy() if isinstance(a, torch.Tensor) else a
        h.update(f"{a.dtype.str}{a.shape};".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return "sha256:" + h.hexdigest()
