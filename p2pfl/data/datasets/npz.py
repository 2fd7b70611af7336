"""``--dataset npz:PATH``: images and labels from a numpy ``.npz`` file of one's own.

The file holds ``x_train, y_train, x_test, y_test`` (or only ``x_train, y_train`` and the run gives
``--test-split FRACTION``), and optionally ``classes``, the classes' names (strings). Images N×H×W, N×H×W×C or
N×C×H×W (p2pfl.data.datasets._own says how they are told apart), uint8 or float in [0, 1]; labels integers.
Read with ``np.load(allow_pickle=False)``: a data file never runs code, so object arrays are refused. Only after
the arrays' headers are read (p2pfl.runtime.limits.load_npz): a header may claim any shape, so arrays larger than
their data, or together past the memory budget (P2PFL_MAX_BYTES), are refused before anything is allocated.

    np.savez("digits.npz", x_train=x, y_train=y, x_test=xt, y_test=yt)
    python -m p2pfl.run --algorithm fedavg --dataset npz:digits.npz --peers 8
"""
from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np

from p2pfl.data.datasets._base import DATASETS, MAX_CLASSES, Arrays
from p2pfl.data.datasets._own import OwnFiles
from p2pfl.runtime.limits import ZIP_FAULTS, load_npz, npz_headers

ARRAYS = ("x_train", "y_train", "x_test", "y_test")
T = TypeVar("T")


@DATASETS.register("npz", argument="PATH")
class Npz(OwnFiles):
    """Arrays x_train, y_train (x_test, y_test, classes) of a numpy .npz file."""

    @classmethod
    def has_test(cls, path: Path) -> bool:
        try:
            with zipfile.ZipFile(path) as z:
                return "x_test.npy" in z.namelist()
        except (OSError, EOFError, ValueError, *ZIP_FAULTS):
            return False  # reported by load, in its own words

    def load(self) -> Arrays:
        with self.reading():
            read = self.read(self.located())
            classes = read.get("classes")
            if classes is not None and (classes.ndim != 1 or classes.dtype.kind not in "US"
                                        or len(classes) > MAX_CLASSES):
                raise self.fail(f"classes must be a list of at most {MAX_CLASSES} names (strings), got "
                                f"{classes.dtype} of shape {classes.shape}")
            return self.arrays(read["x_train"], read["y_train"], read.get("x_test"), read.get("y_test"),
                               None if classes is None else tuple(str(c) for c in classes))

    def read(self, path: Path) -> dict[str, np.ndarray]:
        """The arrays of ARRAYS and classes the file holds, read without running code, and only after their headers
        said they fit in memory (p2pfl.runtime.limits.load_npz)."""
        try:
            with open(path, "rb") as f:
                magic = f.read(6)
        except OSError as e:
            raise self.fail(f"cannot be read ({type(e).__name__}: {' '.join(str(e).split())})") from None
        if not magic:
            raise self.fail("is empty (0 bytes), not an .npz file (a zip archive of arrays, as np.savez writes)")
        if magic[:1] == b"\x80":
            raise self.fail("is a Python pickle, refused: a data file never runs code (save it with np.savez)")
        if magic == b"\x93NUMPY":
            raise self.fail("is one array (.npy), not an .npz archive of named arrays (np.savez)")
        if magic[:2] != b"PK":
            raise self.fail("is not an .npz file (a zip archive of arrays, as np.savez writes)")
        held = self.unzipped(lambda: npz_headers(path))
        missing = [k for k in ARRAYS[:2] if k not in held]
        if missing:
            raise self.fail(f"lacks array(s) {', '.join(missing)} (holds {', '.join(held) or 'none'})")
        return self.unzipped(lambda: load_npz(path, f"--dataset {self.name}:{self.argument}", (*ARRAYS, "classes")))

    def unzipped(self, step: Callable[[], T]) -> T:
        """What `step` reads of the archive; what a damaged or hostile one makes it raise, one line naming it."""
        try:
            return step()
        except ValueError as e:
            text = " ".join(str(e).split())
            if "allow_pickle" in text:
                raise self.fail("holds pickled Python objects; store plain numeric arrays (and strings for "
                                "classes)") from None
            raise (ValueError(text) if text.startswith("--dataset ") else self.fail(text)) from None
        except (OSError, EOFError, *ZIP_FAULTS) as e:
            raise self.fail(f"is not a readable .npz file ({type(e).__name__}: {' '.join(str(e).split())})") from None
