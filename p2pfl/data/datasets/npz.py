"""``--dataset npz:PATH``: images and labels from a numpy ``.npz`` file of one's own.

The file holds ``x_train, y_train, x_test, y_test`` (or only ``x_train, y_train`` and the run gives
``--test-split FRACTION``), and optionally ``classes``, the classes' names (strings). Images N×H×W, N×H×W×C or
N×C×H×W (p2pfl.data.datasets._own says how they are told apart), uint8 or float in [0, 1]; labels integers.
Read with ``np.load(allow_pickle=False)``: a data file never runs code, so object arrays are refused.

    np.savez("digits.npz", x_train=x, y_train=y, x_test=xt, y_test=yt)
    python -m p2pfl.run --algorithm fedavg --dataset npz:digits.npz --peers 8
"""
from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from p2pfl.data.datasets._base import DATASETS, Arrays
from p2pfl.data.datasets._own import OwnFiles

ARRAYS = ("x_train", "y_train", "x_test", "y_test")


@DATASETS.register("npz", argument="PATH")
class Npz(OwnFiles):
    """Arrays x_train, y_train (x_test, y_test, classes) of a numpy .npz file."""

    @classmethod
    def has_test(cls, path: Path) -> bool:
        try:
            with np.load(path, allow_pickle=False) as z:
                return "x_test" in z.files
        except (OSError, ValueError, zipfile.BadZipFile):
            return False  # reported by load, in its own words

    def load(self) -> Arrays:
        read = self.read(self.located())
        missing = [k for k in ARRAYS[:2] if k not in read]
        if missing:
            raise self.fail(f"lacks array(s) {', '.join(missing)} (holds {', '.join(read) or 'none'})")
        classes = read.get("classes")
        if classes is not None and (classes.ndim != 1 or classes.dtype.kind not in "US"):
            raise self.fail(f"classes must be a list of names (strings), got {classes.dtype} of shape {classes.shape}")
        return self.arrays(read["x_train"], read["y_train"], read.get("x_test"), read.get("y_test"),
                           None if classes is None else tuple(str(c) for c in classes))

    def read(self, path: Path) -> dict[str, np.ndarray]:
        """Every array of the file by name, read without running code."""
        try:
            with open(path, "rb") as f:
                magic = f.read(6)
        except OSError as e:
            raise self.fail(f"cannot be read ({type(e).__name__}: {' '.join(str(e).split())})") from None
        if magic[:1] == b"\x80":
            raise self.fail("is a Python pickle, refused: a data file never runs code (save it with np.savez)")
        if magic == b"\x93NUMPY":
            raise self.fail("is one array (.npy), not an .npz archive of named arrays (np.savez)")
        if magic[:2] != b"PK":
            raise self.fail("is not an .npz file (a zip archive of arrays, as np.savez writes)")
        try:
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        except ValueError as e:
            if "allow_pickle" in str(e):
                raise self.fail("holds pickled Python objects; store plain numeric arrays (and strings for "
                                "classes)") from None
            raise self.fail(" ".join(str(e).split())) from None
        except (OSError, EOFError, zipfile.BadZipFile) as e:
            raise self.fail(f"is not a readable .npz file ({type(e).__name__}: {' '.join(str(e).split())})") from None
