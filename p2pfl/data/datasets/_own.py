"""What the datasets read from a researcher's own files share (``npz:PATH``, ``folder:PATH``, ``csv:PATH``,
LEAF's ``leaf:PATH``, ``femnist:PATH`` and ``sent140:PATH``, ``hf:PATH``): their options, the checks of the arrays
they read, the held-out test split, the manifest's entries (source, digest, statistics), and the cache's key.

`CachedFiles` (csv:, the LEAF formats, the hf kinds) parse their files once: one rank per node parses them while
the others wait, into the data root's cache (p2pfl.data.datasets._files.cached, which folder: decodes into too)
under a digest of the files' bytes, the options, the readers' code and the libraries' versions; then every rank
reads the cache, and the next run too until a file, an option or the code changes.

Images arrive as numpy arrays N×H×W (grey), N×H×W×C or N×C×H×W, uint8 or float in [0, 1]; the layout is told
apart by squareness: N×C×H×W when axes 2 and 3 are equal and axis 1 has 1, 3 or 4 entries, else N×H×W×C when
axes 1 and 2 are equal and axis 3 has 1, 3 or 4 entries (only 1×1, 3×3 or 4×4 images could be read both ways;
they are read as N×C×H×W). Labels are integers >= 0; the classes are counted from them (the largest label plus
one) unless the file names them, at most MAX_CLASSES (p2pfl.data.datasets._base). Images resized to --image-size
(at most MAX_IMAGE_SIZE) are checked against the memory budget (p2pfl.runtime.limits) before they are decoded.
Every error is one line naming the dataset's file and what is wrong, whatever a hostile file makes a parser raise.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import inspect
import json
from collections.abc import Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from p2pfl.capabilities import FEATURES, SEQUENCE_LABELS, TOKENS
from p2pfl.data.augment import ImageTransform
from p2pfl.data.datasets._base import MAX_CLASSES, Arrays, Dataset
from p2pfl.data.datasets._files import cached
from p2pfl.options import Check, method_options, opt
from p2pfl.runtime.failure import reading
from p2pfl.runtime.limits import check_bytes
from topologies.streams import MAX_SEED, SHARED, numpy_rng

CHANNELS = (1, 3, 4)
#: --image-size's bound: 1024² is past every image model here (they are built for 32 to 224 pixels), and already
#: 3 MiB an RGB image, so a 100 000-image folder takes 300 GiB.
MAX_IMAGE_SIZE = 1024
#: --max-length's bound: a tweet is at most 280 characters; a text padded to 100 000 takes 800 kB (int64 ids).
MAX_LENGTH = 100_000


@method_options("dataset: npz, folder, csv, leaf, femnist, sent140")
class OwnFilesOptions:
    """The options of the datasets read from one's own files."""

    test_split: float | None = opt(None, "a dataset of one's own files without a test set of its own (npz:, folder:, "
                                         "csv:, leaf:, femnist:, sent140:, hf:): the fraction of the samples held out "
                                         "to test (drawn by --split-seed)", section="data", bounds="(0, 1)")
    split_seed: int = opt(0, "seed of --test-split's draw (fixed by default: the same test samples for every --seed, "
                             "as a file's own test set is)", section="data", bounds=f"[0, {MAX_SEED}]")
    image_size: int = opt(32, "folder:/hf: the side every image is resized to (square); at most 1024: N images take "
                              "3·N·side² bytes (1024: 3 MiB each), and no model here is built for larger",
                          section="data", bounds=f"[4, {MAX_IMAGE_SIZE}] pixels")
    label_column: str | None = opt(None, "csv: the column holding the labels (default: the last)", section="data")
    natural_column: str | None = opt(None, "csv: the column whose values are the rows' natural groups (a writer, a "
                                           "hospital) for --partition natural; it is no feature", section="data")
    impute: str = opt("none", "csv: a missing feature value is refused (none) or takes the training rows' mean, a "
                              "missing category no one-hot entry (mean)", ("none", "mean"), section="data")
    max_length: int = opt(80, "sent140: the characters of a text kept: a longer one is cut, a shorter one padded; at "
                              "most 100000: every text takes 8·max_length bytes padded, and a tweet has 280",
                          section="data", bounds=f"[2, {MAX_LENGTH}]")
    flip: bool = opt(True, "npz:/folder:/hf: mirror training images as photographs are (the supervised crop's flip, "
                           "SimCLR's and MAE's); --no-flip for text, digits, anything whose mirror image is another "
                           "class (femnist: never mirrored)", section="data")


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
        """PATH exists; --test-split given exactly when the files hold no test set; --no-flip only for images."""
        super().check(cfg, check)
        gives = "feature vectors" if FEATURES in cls.capabilities else "token sequences" if cls.capabilities & {
            TOKENS, SEQUENCE_LABELS} else None
        check(getattr(cfg, "flip", True) or gives is None, "flip",
              f"--dataset {cls.name}:{cls.argument} gives {gives}, no images to mirror")
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

    def transform(self) -> ImageTransform:
        """The dataset's own transform, unmirrored under --no-flip."""
        own = super().transform()
        return dataclasses.replace(own, flip=own.flip and getattr(self.options, "flip", True))

    #: The distributions whose versions change what is made of the files (a decoder's), part of the cache's key.
    libraries: ClassVar[tuple[str, ...]] = ()

    def cache_key(self, files: Iterable[Path], options: dict[str, Any], by_content: bool = True) -> str:
        """A digest of what the arrays made of `files` depend on: the readers' code (`code_digest`), the dataset and
        its PATH, `options`, the `libraries`' versions, and each file's name with its bytes (`by_content`: a file
        rewritten within the file system's timestamp granularity keeps its size and time) or its size and
        modification time (a folder of many images, which are read far more slowly than listed)."""
        base = self.located()
        h = hashlib.sha256(json.dumps([code_digest(type(self)), self.name, str(base.resolve()), options,
                                       [(lib, version(lib)) for lib in self.libraries]], sort_keys=True).encode())
        for f in files:
            h.update(f"{f.relative_to(base) if f.is_relative_to(base) else f};".encode())
            if by_content:
                with open(f, "rb") as stream:
                    h.update(hashlib.file_digest(stream, "sha256").digest())
            else:
                st = f.stat()
                h.update(f"{st.st_size}:{st.st_mtime_ns};".encode())
        return h.hexdigest()

    @property
    def where(self) -> str:
        """The dataset and its file, as messages name them: ``--dataset NAME:PATH``."""
        return f"--dataset {self.name}:{self.argument}"

    def fail(self, message: str) -> ValueError:
        """The one-line error naming the dataset's file."""
        return ValueError(f"{self.where}: {message}")

    def reading(self) -> AbstractContextManager[None]:
        """Within the block, what a damaged or hostile file makes a parser raise (p2pfl.runtime.failure.INPUT_FAULTS:
        a RecursionError of a JSON document nested too deeply, an OverflowError of a number past int64, ...) is one
        line naming the dataset's file."""
        return reading(self.where)

    def check_images(self, n: int, channels: int, size: int) -> None:
        """Refuse, before they are decoded, `n` images of `channels` × `size`² bytes past the memory budget."""
        check_bytes(f"{self.where}: {n} images of {channels}×{size}×{size} pixels "
                    f"(--image-size {size})", n * channels * size * size)

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
        if y.max() >= MAX_CLASSES:
            distinct = len(np.unique(y))
            raise self.fail(f"{what} holds a label of {int(y.max())}: the classes are counted as the largest label "
                            f"+ 1, over the limit of {MAX_CLASSES} classes; it holds {distinct} distinct labels: "
                            f"renumber them 0..{distinct - 1}")
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


class CachedFiles(OwnFiles):
    """A dataset whose `parse` of its files is kept in the data root's cache (this module's docstring)."""

    #: The options that change nothing the files are parsed into (they act on training batches), left out of the key.
    unkeyed: ClassVar[tuple[str, ...]] = ("flip",)

    def parse(self) -> Arrays:
        """The arrays of the files, read and checked (what `load` gives when the cache lacks it)."""
        raise NotImplementedError

    def sources(self) -> list[Path]:
        """The files parsed (their bytes key the cache): PATH, or every file below it."""
        path = self.located()
        return [path] if path.is_file() else sorted(f for f in path.rglob("*") if f.is_file())

    def prepare(self) -> None:
        """Parse the files into the cache (one rank per node), unless it holds them already."""
        self.load()

    def load(self) -> Arrays:
        options = {k: v for k, v in dataclasses.asdict(self.options).items() if k not in self.unkeyed}
        with self.reading():
            try:
                key = self.cache_key(self.sources(), options)
            except OSError:  # a file that cannot be read: parse says which, in its words
                return self.parse()
            return cached("parsed", self.name, key, self.parse, self.root, f"--dataset {self.name}:{self.argument}",
                          encode=packed, decode=unpacked)


#: The arrays of an `Arrays` a cache holds; the rest of it is one JSON string, `META`.
DATA, META = ("x_train", "y_train", "x_test", "y_test", "groups"), "meta"


def packed(arrays: Arrays) -> dict[str, np.ndarray]:
    """`arrays` as an .npz's arrays, none of objects: the data as they are, the rest (classes, statistics, the
    manifest's entries, vocabulary) as JSON."""
    out = {k: np.asarray(a.numpy() if isinstance(a, torch.Tensor) else a) for k in DATA
           if (a := getattr(arrays, k)) is not None}
    listed = {k: None if (v := getattr(arrays, k)) is None else list(v)
              for k in ("classes", "mean", "std", "vocabulary")}
    out[META] = np.array(json.dumps({**listed, "num_classes": arrays.num_classes, "padding": arrays.padding,
                                     "extra": arrays.extra}, default=_plain))
    return out


def _plain(value: Any) -> Any:
    """numpy's scalars and arrays as the Python values the manifest writes for them."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is no JSON value")


def unpacked(read: dict[str, np.ndarray]) -> Arrays:
    """The `Arrays` of `packed`'s arrays (KeyError, ValueError or TypeError when they are not)."""
    meta = json.loads(str(read.pop(META)))
    unknown = set(read) - set(DATA)
    if unknown:
        raise KeyError(f"unknown arrays {sorted(unknown)}")
    return Arrays(**{k: read.get(k) for k in DATA}, **meta)


@functools.cache
def code_digest(cls: type) -> str:
    """SHA-256 of the code that reads files into arrays: every module of the datasets' package, and the file of
    `cls` (a researcher's dataset lives in their own)."""
    files = sorted(Path(__file__).parent.glob("*.py"))
    try:
        own = inspect.getsourcefile(cls)
    except (OSError, TypeError):  # defined where no file holds it (an interpreter's session)
        own = None
    h = hashlib.sha256()
    for f in files + ([Path(own)] if own and Path(own) not in files else []):
        h.update(f.read_bytes())
    return h.hexdigest()


def version(distribution: str) -> str:
    """The installed version of `distribution`, or "absent"."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def digest(*arrays: torch.Tensor | np.ndarray) -> str:
    """SHA-256 of the arrays' dtypes, shapes and bytes (the data as the run holds it): "sha256:<hex>"."""
    h = hashlib.sha256()
    for a in arrays:
        a = a.numpy() if isinstance(a, torch.Tensor) else a
        h.update(f"{a.dtype.str}{a.shape};".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return "sha256:" + h.hexdigest()
