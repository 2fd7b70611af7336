"""``--dataset femnist:PATH``: LEAF's FEMNIST (Caldas et al. 2018): handwritten digits and letters of the EMNIST
writers, as 28×28 grey images with each sample's writer (its LEAF user).

LEAF's layout, PATH and the users: p2pfl.data.datasets._leaf. Every x is a list of 784 numbers in [0, 1], a 28×28
image row by row, as LEAF's preprocessing writes it (the grey PNG's pixel / 255: 1.0 is the white paper, the ink is
dark); it is kept as LEAF stores it, uint8 ``round(255 v)`` (half to even), one channel. Every y is the class,
an integer in [0, 62): digits 0..9, upper-case letters A..Z (10..35), lower-case a..z (36..61), LEAF's numbering;
the classes are the 62 whatever the files hold. The normalisation is the training images' own. The files are parsed
once into the data root's cache (p2pfl.data.datasets._own.CachedFiles); the manifest records the users, their
samples, the statistics, the digest and the training transform, ``augment: {flip: false, pad: 255}``: handwriting is
never mirrored and the random crop's padding is white paper (the class's `flip` and `pad_fill` say why).

    femnist/train/all_data_0_niid_0_keep_0_train_9.json  femnist/test/all_data_0_niid_0_keep_0_test_9.json
    python -m p2pfl.run --algorithm fedavg --dataset femnist:femnist --partition natural --peers 16
"""
from __future__ import annotations

import string
from typing import Any

import numpy as np
import torch

from p2pfl.data.datasets._base import DATASETS, Arrays
from p2pfl.data.datasets._leaf import PIXELS, LeafFiles, shown
from p2pfl.data.datasets._own import digest

#: LEAF's FEMNIST classes, in its numbering.
CLASSES = tuple(string.digits + string.ascii_uppercase + string.ascii_lowercase)
SIDE = 28


@DATASETS.register("femnist", argument="PATH")
class Femnist(LeafFiles):
    """LEAF JSON in FEMNIST's format: 784 pixel values in [0, 1] and a class of 62; each sample's writer kept."""

    layout = "femnist"
    num_classes = len(CLASSES)
    #: Never mirrored: a mirrored 'b' is a 'd', a mirrored 'J' or '3' no character at all.
    flip = False
    #: The crop's padding is white paper (LEAF's 1.0, the background), not black (a frame of ink no writer drew).
    #: Not edge replication: a stroke touching the border would be smeared into a bar of ink across the padding.
    pad_fill = 255

    def parse(self) -> Arrays:
        train, test = self.samples()
        groups, users = self.users(train)
        x_train, x_test = self.images_of(train.x), self.images_of(test.x)
        y_train, y_test = np.array(train.y, dtype=np.int64), np.array(test.y, dtype=np.int64)
        xf = torch.from_numpy(x_train).double() / 255  # as p2pfl.data.datasets.assemble computes it, recorded
        mean, std = [float(xf.mean())], [float(xf.std())] if len(x_train) > 1 else [1.0]
        extra: dict[str, Any] = {
            **self.record(), "users": users, "user_samples": np.bincount(groups, minlength=len(users)).tolist(),
            "mean": mean, "std": std, "digest": digest(x_train, y_train, groups, x_test, y_test)}
        return Arrays(x_train, y_train, x_test, y_test, num_classes=len(CLASSES), classes=CLASSES, mean=mean, std=std,
                      extra=extra, groups=groups)

    @staticmethod
    def images_of(rows: list[np.ndarray]) -> np.ndarray:
        """uint8 images N×1×28×28 of the samples' pixel rows."""
        return np.stack(rows).reshape(len(rows), 1, SIDE, SIDE)

    def take(self, x: list, y: list, where: str, user: str) -> tuple[list, list]:
        """Each sample's pixels as uint8 (round(255 v), half to even) and its class; one user's samples are
        checked at once (numpy), sample by sample only to name the first that is wrong."""
        try:
            pixels = np.array(x) if x else np.zeros((0, PIXELS))
            labels = np.array(y) if y else np.zeros(0, dtype=np.int64)
        except ValueError:  # ragged lists
            pixels = labels = np.zeros(0, dtype=object)
        good = (pixels.dtype.kind in "fiu" and pixels.shape == (len(x), PIXELS) and labels.dtype.kind in "iu"
                and labels.shape == (len(y),))
        if good and len(x):
            good = bool(np.isfinite(pixels).all() and pixels.min() >= 0 and pixels.max() <= 1
                        and labels.min() >= 0 and labels.max() < len(CLASSES))
        if not good:
            for i, (xi, yi) in enumerate(zip(x, y)):
                self.check_sample(xi, yi, where, user, i)
            raise self.fail(f"{where}: user {user!r}: x must be lists of {PIXELS} numbers in [0, 1], y classes in "
                            f"[0, {len(CLASSES)})")
        images = np.rint(pixels.astype(np.float64) * 255).astype(np.uint8)
        return list(images), labels.astype(np.int64).tolist()

    def check_sample(self, x: Any, y: Any, where: str, user: str, i: int) -> None:
        """Refuse, naming it, a sample that is not 784 pixel values in [0, 1] and a class in [0, 62)."""
        if not isinstance(x, list) or len(x) != PIXELS or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in x):
            got = f"a list of {len(x)}" if isinstance(x, list) else f"a {type(x).__name__}"
            raise self.wrong(where, user, i, x, f"x must be a list of {PIXELS} numbers (a 28×28 image, FEMNIST's "
                                                f"format), got {got}")
        low, high = min(x), max(x)
        if not 0 <= low <= high <= 1:
            raise self.wrong(where, user, i, x, f"pixel values must lie in [0, 1] (LEAF's v / 255), got "
                                                f"[{low:g}, {high:g}]")
        if not isinstance(y, int) or isinstance(y, bool) or not 0 <= y < len(CLASSES):
            raise self.wrong(where, user, i, x, f"y must be a class in [0, {len(CLASSES)}) (FEMNIST's 62), "
                                                f"got {shown(y)}")
