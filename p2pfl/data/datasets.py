"""Image datasets held as uint8 tensors (N×C×H×W), found on disk without network access.

Where a dataset is looked for, in order:

- the data root: the ``data_dir`` argument, else ``$P2PFL_DATA``, else ``~/.cache/p2pfl``;
- fashion-mnist: ``<root>/FashionMNIST/raw`` (torchvision), ``<root>/fashion-mnist``, ``<root>`` itself (the
  original ``*-idx?-ubyte[.gz]`` files), then Debian's ``/usr/share/datasets/fashion-mnist``
  (``apt-get install dataset-fashion-mnist``);
- cifar10 / cifar100: ``<root>/cifar-10-batches-py`` / ``<root>/cifar-100-python`` (torchvision pickles, read
  without running code: ``p2pfl.data.cifar_pickle``),
  ``<root>/<name>.npz`` (uint8 x_train/y_train/x_test/y_test, NHWC), and for cifar10 the JPEG archive
  ``cifar10-jpeg.npz`` in the root or in ``../shared/data`` next to the project, decoded once and cached as
  ``<root>/cifar10.npz`` (or ``~/.cache/p2pfl/cifar10.npz`` when the root is read-only);
- synthetic: generated from the seed, never read.

Nothing is downloaded unless asked (``allow_download=True``); in a multi-process run only node leaders
download, through :func:`ensure_dataset`, while the other ranks wait on a barrier.
"""
from __future__ import annotations

import gzip
import io
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from p2pfl.data.augment import dataset_stats
from p2pfl.data.cifar_pickle import read_batch, read_names
from p2pfl.seeding import SHARED, torch_generator

DATASETS = ("fashion-mnist", "cifar10", "cifar100", "synthetic")

_ALIASES = {"fashion-mnist": "fashion-mnist", "fashionmnist": "fashion-mnist", "fmnist": "fashion-mnist",
            "cifar10": "cifar10", "cifar-10": "cifar10", "cifar100": "cifar100", "cifar-100": "cifar100",
            "synthetic": "synthetic"}

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
_PROJECT_ROOT = Path(__file__).resolve().parents[2]

FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
                         "Bag", "Ankle boot")
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
_FMNIST_FILES = {"x_train": "train-images-idx3-ubyte", "y_train": "train-labels-idx1-ubyte",
                 "x_test": "t10k-images-idx3-ubyte", "y_test": "t10k-labels-idx1-ubyte"}


class DatasetNotFound(ValueError):
    """A dataset is not on disk where p2pfl looks for it (the message is one line with the remedies)."""


@dataclass
class ImageDataset:
    """A labelled image dataset in memory: uint8 images N×C×H×W and int64 labels (float multi-hot when
    ``multilabel``), plus the per-channel mean/std used to normalise it."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    classes: tuple[str, ...]
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()
    multilabel: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def channels(self) -> int:
        """Number of image channels (1 or 3)."""
        return int(self.x_train.shape[1])

    @property
    def image_size(self) -> int:
        """Image height (the images are square for every dataset here)."""
        return int(self.x_train.shape[2])

    def __repr__(self) -> str:
        return (f"ImageDataset({self.name!r}, train={tuple(self.x_train.shape)}, test={tuple(self.x_test.shape)}, "
                f"classes={self.num_classes}, multilabel={self.multilabel})")


def canonical_name(name: str) -> str:
    """The canonical dataset name for ``name`` (case and '_' / '-' insensitive); ValueError if unknown."""
    key = str(name).strip().lower().replace("_", "-")
    if key not in _ALIASES:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    return _ALIASES[key]


def data_root(data_dir: str | os.PathLike | None = None) -> Path:
    """The data root: ``data_dir`` if given, else ``$P2PFL_DATA``, else ``~/.cache/p2pfl``."""
    if data_dir is not None and str(data_dir) != "":
        return Path(data_dir).expanduser()
    env = os.environ.get("P2PFL_DATA")
    if env:
        return Path(env).expanduser()
    return Path("~/.cache/p2pfl").expanduser()


def _default_cache() -> Path:
    return Path("~/.cache/p2pfl").expanduser()


def _shared_data_dirs() -> list[Path]:
    """``../shared/data`` next to the project (and next to the working directory), where CI keeps CIFAR-10."""
    dirs = []
    for base in (_PROJECT_ROOT, Path.cwd()):
        d = (base.parent / "shared" / "data").resolve()
        if d not in dirs:
            dirs.append(d)
    return dirs


# --------------------------------------------------------------------------------------------------- locating

def _idx_file(folder: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def _candidates(name: str, root: Path) -> list[tuple[str, Path]]:
    """Every (kind, path) looked at for ``name``, in search order."""
    if name == "fashion-mnist":
        dirs = [root / "FashionMNIST" / "raw", root / "fashion-mnist", root, DEBIAN_FASHION_MNIST]
        return [("idx", d) for d in dirs]
    if name == "cifar10":
        out = [("pickle10", root / "cifar-10-batches-py"), ("npz", root / "cifar10.npz"),
               ("npz", _default_cache() / "cifar10.npz"), ("jpeg-npz", root / "cifar10-jpeg.npz")]
        for d in _shared_data_dirs():
            out += [("npz", d / "cifar10.npz"), ("jpeg-npz", d / "cifar10-jpeg.npz")]
        return _dedupe(out)
    if name == "cifar100":
        return _dedupe([("pickle100", root / "cifar-100-python"), ("npz", root / "cifar100.npz")])
    return []


def _dedupe(items: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    seen, out = set(), []
    for kind, p in items:
        if p not in seen:
            seen.add(p)
            out.append((kind, p))
    return out


def _present(kind: str, path: Path) -> bool:
    if kind == "idx":
        return path.is_dir() and all(_idx_file(path, s) is not None for s in _FMNIST_FILES.values())
    if kind == "pickle10":
        return (path / "data_batch_1").is_file() and (path / "test_batch").is_file()
    if kind == "pickle100":
        return (path / "train").is_file() and (path / "test").is_file()
    return path.is_file()


def _find(name: str, root: Path) -> tuple[str, Path] | None:
    for kind, path in _candidates(name, root):
        if _present(kind, path):
            return kind, path
    return None


def _not_found(name: str, root: Path) -> DatasetNotFound:
    looked = ", ".join(str(p) for _, p in _candidates(name, root))
    hints = {
        "fashion-mnist": "apt-get install dataset-fashion-mnist (files in /usr/share/datasets/fashion-mnist)",
        "cifar10": ("decode the shared archive with `python ../shared/data/cifar10_jpeg.py npz DIR/cifar10.npz`, "
                    "or put torchvision's cifar-10-batches-py in DIR"),
        "cifar100": "put torchvision's cifar-100-python (or cifar100.npz) in DIR",
    }[name]
    return DatasetNotFound(f"dataset {name!r} not found; looked in: {looked}; provide it with --data-dir DIR "
                           f"or P2PFL_DATA=DIR, or {hints}, or pass --download to fetch it with torchvision")


# --------------------------------------------------------------------------------------------------- readers

def _read_idx(path: Path) -> np.ndarray:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path} is not an idx file of unsigned bytes")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * k: 8 + 4 * k], "big") for k in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: header says {dims} but holds {data.size} bytes")
    return data.reshape(dims).copy()  # writable, so torch can own it


def _load_idx_folder(folder: Path) -> dict[str, np.ndarray]:
    arrays = {k: _read_idx(_idx_file(folder, stem)) for k, stem in _FMNIST_FILES.items()}
    arrays["x_train"] = arrays["x_train"][:, None]
    arrays["x_test"] = arrays["x_test"][:, None]
    arrays["classes"] = FASHION_MNIST_CLASSES
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
    with np.load(path, allow_pickle=False) as z:
        missing = [k for k in ("x_train", "y_train", "x_test", "y_test") if k not in z.files]
        if missing:
            raise ValueError(f"{path} lacks arrays {missing}; expected uint8 x_train/x_test (NHWC) and labels")
        out = {k: z[k] for k in ("x_train", "y_train", "x_test", "y_test")}
        out["classes"] = tuple(str(c) for c in z["classes"]) if "classes" in z.files else None
    for k in ("x_train", "x_test"):
        x = out[k]
        if x.dtype != np.uint8:
            raise ValueError(f"{path}: {k} must be uint8, found {x.dtype}")
        out[k] = x[:, None] if x.ndim == 3 else np.transpose(x, (0, 3, 1, 2))  # NHW(C) -> NCHW
    return out


def _decode_jpeg_npz(path: Path) -> dict[str, np.ndarray]:
    """Decode the shared JPEG archive (bytes + offsets per split) with Pillow, exactly as cifar10_jpeg.py does."""
    from PIL import Image

    out: dict = {}
    with np.load(path, allow_pickle=False) as z:
        for split in ("train", "test"):
            data, offs = z[f"{split}_bytes"], z[f"{split}_offsets"]
            x = np.empty((len(offs) - 1, 32, 32, 3), dtype=np.uint8)
            for k in range(len(offs) - 1):  # JPEG decoding has no batched form; done once, then cached
                x[k] = np.asarray(Image.open(io.BytesIO(data[offs[k]:offs[k + 1]].tobytes())).convert("RGB"))
            out[f"x_{split}"] = x
            out[f"y_{split}"] = np.asarray(z[f"{split}_labels"])
        out["classes"] = np.asarray(z["classes"]) if "classes" in z.files else np.asarray(CIFAR10_CLASSES)
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


def _prepare_jpeg(path: Path, root: Path) -> tuple[Path | None, dict | None]:
    """Decode the JPEG archive once and cache the decoded .npz in the data root (else ~/.cache/p2pfl).
    Returns (cached path, None), or (None, arrays) when no cache folder is writable."""
    arrays = _decode_jpeg_npz(path)
    for d in (root, _default_cache()):
        if _writable_dir(d):
            target = d / "cifar10.npz"
            try:
                _atomic_savez(target, arrays)
                return target, None
            except OSError:
                continue
    return None, arrays


def _load_source(name: str, kind: str, path: Path, root: Path) -> dict:
    if kind == "idx":
        return _load_idx_folder(path)
    if kind in ("pickle10", "pickle100"):
        return _load_cifar_pickles(path, hundred=(kind == "pickle100"))
    if kind == "npz":
        return _load_npz(path)
    cached, arrays = _prepare_jpeg(path, root)
    if cached is not None:
        return _load_npz(cached)
    arrays["x_train"] = np.transpose(arrays["x_train"], (0, 3, 1, 2))
    arrays["x_test"] = np.transpose(arrays["x_test"], (0, 3, 1, 2))
    arrays["classes"] = tuple(str(c) for c in arrays["classes"])
    return arrays


def _download(name: str, root: Path) -> None:
    import torchvision

    cls = {"fashion-mnist": torchvision.datasets.FashionMNIST, "cifar10": torchvision.datasets.CIFAR10,
           "cifar100": torchvision.datasets.CIFAR100}[name]
    try:
        root.mkdir(parents=True, exist_ok=True)
        for train in (True, False):
            cls(str(root), train=train, download=True)
    except Exception as e:  # network or disk errors: one line, with what was tried
        msg = " ".join(str(e).split())
        raise DatasetNotFound(f"downloading {name!r} into {root} failed ({type(e).__name__}: {msg}); "
                              f"provide the files with --data-dir DIR or P2PFL_DATA=DIR instead") from e


# --------------------------------------------------------------------------------------------------- public API

def ensure_dataset(name: str, data_dir: str | os.PathLike | None = None, allow_download: bool = False,
                   barrier: Callable[[], None] | None = None, is_node_leader: bool = True) -> None:
    """Make ``name`` loadable on this node before every rank calls :func:`load_dataset`.

    Node leaders find the dataset, decode/cache the CIFAR-10 JPEG archive if that is the form found, and
    download it when missing and ``allow_download`` is set; the other ranks only wait on ``barrier``, which
    every rank calls (the leader too, even when it fails, so nobody hangs). Raises the leader's error there.
    """
    name = canonical_name(name)
    error: Exception | None = None
    if is_node_leader and name != "synthetic":
        root = data_root(data_dir)
        try:
            found = _find(name, root)
            if found is None:
                if not allow_download:
                    raise _not_found(name, root)
                _download(name, root)
            elif found[0] == "jpeg-npz":
                _prepare_jpeg(found[1], root)
        except Exception as e:  # reach the barrier first, then raise
            error = e
    if barrier is not None:
        barrier()
    if error is not None:
        raise error


def load_dataset(name: str, data_dir: str | os.PathLike | None = None, allow_download: bool = False,
                 **options) -> ImageDataset:
    """Load a dataset by name ("fashion-mnist", "cifar10", "cifar100", "synthetic") as uint8 tensors.

    ``options`` are for "synthetic" only (see :func:`synthetic_dataset`). Raises :class:`DatasetNotFound`
    (one line: where it looked and how to provide the data) when the files are absent and downloading is off.
    """
    name = canonical_name(name)
    if name == "synthetic":
        return synthetic_dataset(**options)
    if options:
        raise ValueError(f"options {sorted(options)} apply to the synthetic dataset only, not {name!r}")
    root = data_root(data_dir)
    found = _find(name, root)
    if found is None:
        if not allow_download:
            raise _not_found(name, root)
        _download(name, root)
        found = _find(name, root)
        if found is None:
            raise _not_found(name, root)
    arrays = _load_source(name, found[0], found[1], root)
    num_classes = 100 if name == "cifar100" else 10
    classes = arrays.get("classes")
    if not classes:
        classes = FASHION_MNIST_CLASSES if name == "fashion-mnist" else (
            CIFAR10_CLASSES if name == "cifar10" else tuple(map(str, range(num_classes))))
    x_train = torch.from_numpy(np.ascontiguousarray(arrays["x_train"]))
    mean, std = dataset_stats(name, int(x_train.shape[1]))
    return ImageDataset(
        name=name,
        x_train=x_train,
        y_train=torch.from_numpy(np.asarray(arrays["y_train"]).astype(np.int64)),
        x_test=torch.from_numpy(np.ascontiguousarray(arrays["x_test"])),
        y_test=torch.from_numpy(np.asarray(arrays["y_test"]).astype(np.int64)),
        num_classes=num_classes, classes=tuple(classes), mean=mean, std=std,
        extra={"source": str(found[1])},
    )


def synthetic_dataset(num_train: int = 2000, num_test: int = 500, num_classes: int = 10, channels: int = 3,
                      image_size: int = 32, seed: int = 0, noise: float = 0.1) -> ImageDataset:
    """A small seeded image set a model can learn: each class has a smooth random colour pattern; a sample is
    its class pattern at a random contrast and brightness plus pixel noise. Labels are shuffled and balanced
    (to within one) in both the train and the test split."""
    if min(num_train, num_test) < 1 or num_classes < 2 or channels not in (1, 3) or image_size < 4:
        raise ValueError("synthetic dataset needs num_train, num_test >= 1, num_classes >= 2, channels 1 or 3 "
                         "and image_size >= 4")
    g = torch_generator(seed, SHARED, "synthetic")
    n = num_train + num_test
    coarse = torch.randn(num_classes, channels, 4, 4, generator=g, dtype=torch.float64)
    templates = F.interpolate(coarse, size=(image_size, image_size), mode="bicubic", align_corners=False)
    templates = templates / templates.flatten(1).std(dim=1).view(-1, 1, 1, 1)
    y = torch.cat([(torch.arange(m) % num_classes)[torch.randperm(m, generator=g)] for m in (num_train, num_test)])
    contrast = 0.7 + 0.6 * torch.rand(n, 1, 1, 1, generator=g, dtype=torch.float64)
    brightness = 0.05 * torch.randn(n, 1, 1, 1, generator=g, dtype=torch.float64)
    pixel_noise = noise * torch.randn(n, channels, image_size, image_size, generator=g,
                                      dtype=torch.float64)
    x = 0.5 + 0.18 * contrast * templates[y] + brightness + pixel_noise
    x = (x.clamp(0, 1) * 255).round().to(torch.uint8)
    xf = x[:num_train].double() / 255
    mean = tuple(float(v) for v in xf.mean(dim=(0, 2, 3)))
    std = tuple(float(v) for v in xf.std(dim=(0, 2, 3)))
    return ImageDataset(
        name="synthetic", x_train=x[:num_train].contiguous(), y_train=y[:num_train].clone(),
        x_test=x[num_train:].contiguous(), y_test=y[num_train:].clone(), num_classes=num_classes,
        classes=tuple(f"class{k}" for k in range(num_classes)), mean=mean, std=std,
        extra={"seed": seed, "noise": noise},
    )
