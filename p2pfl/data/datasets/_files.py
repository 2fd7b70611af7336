"""Datasets read from files under the data root, found without network access: the shared loading code of the
built-in file datasets (`FileDataset`: where it looks, idx files, CIFAR pickles, npz archives, the JPEG archive)
and the data root itself.

The data root: the ``data_dir`` argument, else ``$P2PFL_DATA``, else ``~/.cache/p2pfl``. Nothing is downloaded
unless asked (``allow_download=True``); in a multi-process run only node leaders prepare (decode, cache,
download) while the other ranks wait (p2pfl.data.datasets.ensure_dataset). `cached` is the one cache of arrays
made from files (decoded images, parsed JSON, tables): an .npz in the data root under a key of what they depend on.
"""
from __future__ import annotations

import gzip
import io
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from p2pfl.data.cifar_pickle import read_batch, read_names
from p2pfl.data.datasets._base import Arrays, Dataset
from p2pfl.runtime.failure import INPUT_FAULTS, input_fault_line
from p2pfl.runtime.limits import ZIP_FAULTS, check_bytes, load_npz

_PROJECT_ROOT = Path(__file__).resolve().parents[3]

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
FMNIST_FILES = {"x_train": "train-images-idx3-ubyte", "y_train": "train-labels-idx1-ubyte",
                "x_test": "t10k-images-idx3-ubyte", "y_test": "t10k-labels-idx1-ubyte"}


class DatasetNotFound(ValueError):
    """A dataset is not on disk where p2pfl looks for it (the message is one line with the remedies)."""


def data_root(data_dir: str | os.PathLike | None = None) -> Path:
    """The data root: ``data_dir`` if given, else ``$P2PFL_DATA``, else ``~/.cache/p2pfl``."""
    if data_dir is not None and str(data_dir) != "":
        return Path(data_dir).expanduser()
    env = os.environ.get("P2PFL_DATA")
    if env:
        return Path(env).expanduser()
    return Path("~/.cache/p2pfl").expanduser()


def default_cache() -> Path:
    return Path("~/.cache/p2pfl").expanduser()


def shared_data_dirs() -> list[Path]:
    """``../shared/data`` next to the project (and next to the working directory), where CI keeps CIFAR-10."""
    dirs = []
    for base in (_PROJECT_ROOT, Path.cwd()):
        d = (base.parent / "shared" / "data").resolve()
        if d not in dirs:
            dirs.append(d)
    return dirs


class FileDataset(Dataset):
    """A dataset read from files: looked for where `candidates` says, in order, as (form, path) pairs; the forms
    are those `read` knows ("idx", "pickle10", "pickle100", "npz", "jpeg-npz"); downloaded with torchvision's
    class `torchvision` when allowed."""

    num_classes: ClassVar[int] = 10
    default_classes: ClassVar[tuple[str, ...]] = ()
    #: How to provide it, in the not-found message.
    hint: ClassVar[str] = ""
    #: The torchvision dataset class that downloads it.
    torchvision: ClassVar[str] = ""
    #: Per channel, in [0, 1] units: the normalisation it is known by; None: its training images' own.
    mean: ClassVar[tuple[float, ...] | None] = None
    std: ClassVar[tuple[float, ...] | None] = None

    def candidates(self) -> list[tuple[str, Path]]:
        """Every (form, path) looked at, in search order."""
        raise NotImplementedError

    def find(self) -> tuple[str, Path] | None:
        for form, path in self.candidates():
            if _present(form, path):
                return form, path
        return None

    def not_found(self) -> DatasetNotFound:
        looked = ", ".join(str(p) for _, p in self.candidates())
        return DatasetNotFound(f"dataset {self.name!r} not found; looked in: {looked}; provide it with --data-dir "
                               f"DIR or P2PFL_DATA=DIR, or {self.hint}, or pass --download to fetch it with "
                               f"torchvision")

    def prepare(self) -> None:
        """Find it; decode and cache the JPEG archive if that is the form found; download it when missing and
        allowed."""
        found = self.find()
        if found is None:
            if not self.allow_download:
                raise self.not_found()
            self.download()
        elif found[0] == "jpeg-npz":
            with self.reading(found[1]):
                prepare_jpeg(found[1], self.root)

    def load(self) -> Arrays:
        found = self.find()
        if found is None:
            if not self.allow_download:
                raise self.not_found()
            self.download()
            found = self.find()
            if found is None:
                raise self.not_found()
        with self.reading(found[1]):
            arrays = read(found[0], found[1], self.root)
        classes = arrays.get("classes")
        if not classes:
            classes = self.default_classes or tuple(map(str, range(self.num_classes)))
        mean, std = self.mean, self.std
        channels = int(arrays["x_train"].shape[1])
        if mean is not None and std is not None and len(mean) != channels:  # its first channel's, repeated
            mean, std = (mean[0],) * channels, (std[0],) * channels
        return Arrays(x_train=arrays["x_train"], y_train=arrays["y_train"], x_test=arrays["x_test"],
                      y_test=arrays["y_test"], num_classes=self.num_classes, classes=tuple(classes), mean=mean,
                      std=std, extra={"source": str(found[1])})

    @contextmanager
    def reading(self, path: Path) -> Iterator[None]:
        """Within the block, what a damaged or hostile file makes a reader raise (a gzip or zip stream cut short, a
        decoder's error, numpy's words on an array of another shape) is one line naming the dataset and the file."""
        try:
            yield
        except (*INPUT_FAULTS, *ZIP_FAULTS) as exc:
            if isinstance(exc, ValueError) and str(path) in str(exc):  # one line naming the file already
                if type(exc) is not ValueError:
                    raise  # DataFileRefused, as it is
                raise ValueError(f"--dataset {self.name}: {exc}") from exc
            raise ValueError(input_fault_line(f"--dataset {self.name}: {path}", exc)) from exc

    def download(self) -> None:
        import torchvision

        cls = getattr(torchvision.datasets, self.torchvision)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            for train in (True, False):
                cls(str(self.root), train=train, download=True)
        except Exception as e:  # network or disk errors: one line, with what was tried
            msg = " ".join(str(e).split())
            raise DatasetNotFound(f"downloading {self.name!r} into {self.root} failed ({type(e).__name__}: {msg}); "
                                  f"provide the files with --data-dir DIR or P2PFL_DATA=DIR instead") from e


def dedupe(items: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    seen, out = set(), []
    for form, p in items:
        if p not in seen:
            seen.add(p)
            out.append((form, p))
    return out


def _idx_file(folder: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def _present(form: str, path: Path) -> bool:
    if form == "idx":
        return path.is_dir() and all(_idx_file(path, s) is not None for s in FMNIST_FILES.values())
    if form == "pickle10":
        return (path / "data_batch_1").is_file() and (path / "test_batch").is_file()
    if form == "pickle100":
        return (path / "train").is_file() and (path / "test").is_file()
    return path.is_file()


# --------------------------------------------------------------------------------------------------- readers

def _read_idx(path: Path) -> np.ndarray:
    """An idx file of unsigned bytes (gzipped or not), its size checked from its header before its data is read (a
    gzip stream may expand without bound)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        head = f.read(4)
        if len(head) < 4 or head[0] != 0 or head[1] != 0 or head[2] != 0x08:
            raise ValueError(f"{path} is not an idx file of unsigned bytes")
        raw = f.read(4 * head[3])
        if len(raw) != 4 * head[3]:
            raise ValueError(f"{path}: its idx header is cut short")
        dims = [int.from_bytes(raw[4 * k: 4 + 4 * k], "big") for k in range(head[3])]
        size = math.prod(dims)
        check_bytes(f"{path}: its header's shape {dims}", size)
        data = np.frombuffer(f.read(size + 1), dtype=np.uint8)  # one byte more: a longer file is refused
    if data.size != size:
        raise ValueError(f"{path}: header says {dims} but holds {data.size if data.size <= size else 'more'} bytes")
    return data.reshape(dims).copy()  # writable, so torch can own it


def _load_idx_folder(folder: Path) -> dict[str, np.ndarray]:
    arrays = {k: _read_idx(_idx_file(folder, stem)) for k, stem in FMNIST_FILES.items()}
    arrays["x_train"] = arrays["x_train"][:, None]
    arrays["x_test"] = arrays["x_test"][:, None]
    return arrays


def _load_cifar_pickles(folder: Path, hundred: bool) -> dict[str, np.ndarray]:
    """torchvision's CIFAR pickles, read without running code (`p2pfl.data.cifar_pickle`)."""
    if hundred:
        classes, key, train_files = 100, "fine_labels", [folder / "train"]
        test_file, meta, names_key = folder / "test", folder / "meta", "fine_label_names"
    else:
        classes, key = 10, "labels"
        train_files = [folder / f"data_batch_{k}" for k in range(1, 6) if (folder / f"data_batch_{k}").is_file()]
        test_file, meta, names_key = folder / "test_batch", folder / "batches.meta", "label_names"
    train = [read_batch(path, key, classes) for path in train_files]
    x_test, y_test = read_batch(test_file, key, classes)
    if meta.is_file():
        names = read_names(meta, names_key, classes)
    else:
        names = CIFAR10_CLASSES if not hundred else tuple(map(str, range(100)))
    return {"x_train": np.concatenate([x for x, _ in train]), "y_train": np.concatenate([y for _, y in train]),
            "x_test": x_test, "y_test": y_test, "classes": names}


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    read = load_npz(path, str(path), ("x_train", "y_train", "x_test", "y_test", "classes"))
    missing = [k for k in ("x_train", "y_train", "x_test", "y_test") if k not in read]
    if missing:
        raise ValueError(f"{path} lacks arrays {missing}; expected uint8 x_train/x_test (NHWC) and labels")
    out = {k: read[k] for k in ("x_train", "y_train", "x_test", "y_test")}
    out["classes"] = tuple(str(c) for c in read["classes"]) if "classes" in read else None
    for k in ("x_train", "x_test"):
        x = out[k]
        if x.ndim not in (3, 4):
            raise ValueError(f"{path}: {k} must be images N×H×W or N×H×W×C, got shape {x.shape}")
        if x.dtype != np.uint8:
            raise ValueError(f"{path}: {k} must be uint8, found {x.dtype}")
        out[k] = x[:, None] if x.ndim == 3 else np.transpose(x, (0, 3, 1, 2))  # NHW(C) -> NCHW
    return out


def _decode_jpeg_npz(path: Path) -> dict[str, np.ndarray]:
    """Decode the shared JPEG archive (bytes + offsets per split) with Pillow, exactly as cifar10_jpeg.py does."""
    from PIL import Image

    out: dict = {}
    z = load_npz(path, str(path))
    for split in ("train", "test"):
        data, offs = z[f"{split}_bytes"], z[f"{split}_offsets"]
        check_bytes(f"{path}: {len(offs) - 1} {split} images of 32×32×3", (len(offs) - 1) * 32 * 32 * 3)
        x = np.empty((len(offs) - 1, 32, 32, 3), dtype=np.uint8)
        for k in range(len(offs) - 1):  # JPEG decoding has no batched form; done once, then cached
            x[k] = np.asarray(Image.open(io.BytesIO(data[offs[k]:offs[k + 1]].tobytes())).convert("RGB"))
        out[f"x_{split}"] = x
        out[f"y_{split}"] = np.asarray(z[f"{split}_labels"])
    out["classes"] = np.asarray(z["classes"]) if "classes" in z else np.asarray(CIFAR10_CLASSES)
    return out


def _atomic_savez(target: Path, arrays: dict) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _writable_dir(d: Path) -> bool:
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(d, os.W_OK)


#: The entry of a `cached` file holding its whole key: a file named for the key but holding another is not its cache.
CACHE_KEY = "__cache_key__"


def cached(folder: str, name: str, key: str, make: Callable[[], Any], root: Path, what: str,
           encode: Callable[[Any], dict[str, np.ndarray]] = lambda a: a,
           decode: Callable[[dict[str, np.ndarray]], Any] = lambda a: a) -> Any:
    """What `make` gives, read from its cache ``folder/name-KEY.npz`` in the data root `root` (else in
    ~/.cache/p2pfl) when one is there, else made and cached there (in memory only when neither is writable).

    `key` is a digest of everything the arrays depend on. A cache is written atomically (a temporary file renamed
    over it: ranks that race each write a whole file, a reader sees one whole file) as `encode` gives its arrays,
    and read with ``allow_pickle=False`` (a cache never runs code), then `decode`d. One that cannot be read or
    decoded, or holds another key, is ignored with one warning line naming `what` (the dataset) and rewritten.
    """
    file = f"{name}-{key[:32]}.npz"
    places = (root / folder, default_cache() / folder)
    for d in places:
        path = d / file
        if not path.is_file():
            continue
        try:
            read = load_npz(path, "its arrays")
            if str(read.pop(CACHE_KEY, "")) != key:
                raise ValueError("it holds another key")
            return decode(read)
        except (OSError, EOFError, ValueError, KeyError, TypeError, *ZIP_FAULTS) as e:
            reason = " ".join(str(e).split())[:200]
            print(f"p2pfl: warning: {what}: ignored the cache {path}, unreadable ({type(e).__name__}: {reason}); "
                  "it is made again", flush=True)
    made = make()
    try:
        arrays = {**encode(made), CACHE_KEY: np.array(key)}
    except (TypeError, ValueError) as e:  # a researcher's dataset recording what JSON cannot hold
        print(f"p2pfl: warning: {what}: not cached ({type(e).__name__}: {e})", flush=True)
        return made
    for d in places:
        if _writable_dir(d):
            try:
                _atomic_savez(d / file, arrays)
                break
            except OSError:
                continue
    return made


def prepare_jpeg(path: Path, root: Path) -> tuple[Path | None, dict | None]:
    """Decode the JPEG archive once and cache the decoded .npz in the data root (else ~/.cache/p2pfl).
    Returns (cached path, None), or (None, arrays) when no cache folder is writable."""
    arrays = _decode_jpeg_npz(path)
    for d in (root, default_cache()):
        if _writable_dir(d):
            target = d / "cifar10.npz"
            try:
                _atomic_savez(target, arrays)
                return target, None
            except OSError:
                continue
    return None, arrays


def read(form: str, path: Path, root: Path) -> dict:
    """The arrays (NCHW uint8 images, labels, class names when the files hold them) of the files at `path`."""
    if form == "idx":
        return _load_idx_folder(path)
    if form in ("pickle10", "pickle100"):
        return _load_cifar_pickles(path, hundred=(form == "pickle100"))
    if form == "npz":
        return _load_npz(path)
    cached, arrays = prepare_jpeg(path, root)
    if cached is not None:
        return _load_npz(cached)
    arrays["x_train"] = np.transpose(arrays["x_train"], (0, 3, 1, 2))
    arrays["x_test"] = np.transpose(arrays["x_test"], (0, 3, 1, 2))
    arrays["classes"] = tuple(str(c) for c in arrays["classes"])
    return arrays
