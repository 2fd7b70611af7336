"""``--dataset folder:PATH``: images in one sub-folder per class (torchvision's ImageFolder layout).

PATH holds ``train/`` and ``test/``, each with one folder per class, or the class folders themselves (then the run
gives ``--test-split FRACTION``). The classes are the train tree's folder names, sorted (their labels 0, 1, ...);
images are the files below them with an image suffix (hidden files and others skipped), in sorted order, of any
size: each is decoded with Pillow and resized (stretched, bilinear) to ``--image-size`` square pixels, grey when
every image of the folder is grey, else RGB. Decoded once, by one rank per node (the others wait), and cached as an
.npz in the data root (else ~/.cache/p2pfl; p2pfl.data.datasets._files.cached) under a digest of the file list with
the files' sizes and modification times, the image size, Pillow's version and the readers' code, written
atomically; every rank reads the cache. Nothing is fetched. Its images are mirrored in training unless --no-flip.

    cats-dogs/train/cat/001.jpg  cats-dogs/train/dog/001.jpg  ...  cats-dogs/test/cat/101.jpg  ...
    python -m p2pfl.run --algorithm fedavg --dataset folder:cats-dogs --image-size 32 --peers 8
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from p2pfl.data.datasets._base import DATASETS, MAX_CLASSES, Arrays
from p2pfl.data.datasets._files import cached
from p2pfl.data.datasets._own import OwnFiles

SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".pbm")
GREY = ("1", "L", "LA", "I", "I;16", "F")


@DATASETS.register("folder", argument="PATH")
class Folder(OwnFiles):
    """Images of any size in one folder per class, resized to --image-size."""

    what = "folder"
    test_set = "train/ and test/ folders"
    libraries = ("pillow",)

    @classmethod
    def present(cls, path: Path) -> bool:
        return path.is_dir()

    @classmethod
    def has_test(cls, path: Path) -> bool:
        return (path / "train").is_dir() and (path / "test").is_dir()

    def prepare(self) -> None:
        """Decode the images into the cache (one rank per node), unless it is there already."""
        self.cached()

    def load(self) -> Arrays:
        read = self.cached()
        classes = tuple(str(c) for c in read["classes"])
        return self.arrays(read["x_train"], read["y_train"], read.get("x_test"), read.get("y_test"), classes)

    def cached(self) -> dict[str, np.ndarray]:
        """The decoded arrays: read from the cache, else decoded and cached (in memory if nowhere is writable). Its
        key: the files (paths, which name their labels, sizes, modification times) and the image size."""
        with self.reading():
            classes, trees = self.listing()
            key = self.cache_key([f for files in trees.values() for _, f in files],
                                 {"image_size": self.options.image_size}, by_content=False)
            return cached("folders", "folder", key, lambda: self.decode(classes, trees), self.root,
                          f"--dataset folder:{self.argument}")

    def listing(self) -> tuple[list[str], dict[str, list[tuple[int, Path]]]]:
        """The classes (the train tree's folders, sorted) and, per tree ("train", and "test" when PATH has both),
        its (label, file) pairs in order."""
        path = self.located()
        if not path.is_dir():
            raise self.fail("no such folder")
        roots = {"train": path / "train", "test": path / "test"} if self.has_test(path) else {"train": path}
        classes = self.class_folders(roots["train"])
        if len(classes) > MAX_CLASSES:
            raise self.fail(f"{roots['train']} holds {len(classes)} class folders, over the limit of {MAX_CLASSES} "
                            "classes")
        trees = {}
        for tree, root in roots.items():
            found = {c: images(root / c) for c in self.class_folders(root)}
            unknown = sorted(set(found) - set(classes))
            if unknown:
                raise self.fail(f"{tree}/ has classes the train folders lack: {', '.join(unknown)}")
            empty = [c for c, files in found.items() if not files]
            if empty and tree == "train":
                raise self.fail(f"class folder(s) {', '.join(empty)} hold no images ({', '.join(SUFFIXES)})")
            trees[tree] = [(classes.index(c), f) for c, files in found.items() for f in files]
        return classes, trees

    def class_folders(self, root: Path) -> list[str]:
        found = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
        if not found:
            raise self.fail(f"{root} holds no class folders (one folder of images per class)")
        return found

    def decode(self, classes: list[str], trees: dict[str, list[tuple[int, Path]]]) -> dict[str, np.ndarray]:
        """Every image decoded, resized to --image-size, as uint8 N×C×S×S; grey when all are."""
        size = self.options.image_size
        grey = all(self.image(f, None, size).mode in GREY for files in trees.values() for _, f in files)
        self.check_images(sum(len(files) for files in trees.values()), 1 if grey else 3, size)
        out: dict[str, np.ndarray] = {"classes": np.array(classes)}
        for tree, files in trees.items():
            x = np.empty((len(files), size, size, 1 if grey else 3), dtype=np.uint8)
            for k, (_, f) in enumerate(files):  # image decoding has no batched form; done once, then cached
                x[k] = self.image(f, "L" if grey else "RGB", size)
            out[f"x_{tree}"] = x.transpose(0, 3, 1, 2).copy()
            out[f"y_{tree}"] = np.array([label for label, _ in files], dtype=np.int64)
        return out

    def image(self, f: Path, mode: str | None, size: int) -> Any:
        """The image at `f` in `mode`, resized to size × size as uint8 size×size×C (`resized`; only its header read,
        the image returned, when `mode` is None); one line naming the file when Pillow cannot read it."""
        from PIL import Image

        try:
            with Image.open(f) as im:
                if mode is None:
                    return im
                return resized(im, mode, size)
        except Exception as e:  # noqa: BLE001 - Pillow's decoders raise many kinds on a damaged file: all its fault
            where = f.relative_to(self.located()) if f.is_relative_to(self.located()) else f
            raise self.fail(f"{where} is not an image Pillow can read ({type(e).__name__}: "
                            f"{' '.join(str(e).split())[:200]})") from None


def images(folder: Path) -> list[Path]:
    """The image files below `folder`, sorted by path (hidden files and folders skipped)."""
    return sorted(f for f in folder.rglob("*") if f.suffix.lower() in SUFFIXES and f.is_file()
                  and not any(part.startswith(".") for part in f.relative_to(folder).parts))


def resized(im: Any, mode: str, size: int) -> np.ndarray:
    """A Pillow image converted to `mode` ("L" or "RGB") and stretched to size × size (bilinear; one of that size
    already is kept as it is), as uint8 size×size×C: how every dataset of images of any size resizes them."""
    from PIL import Image

    return np.asarray(im.convert(mode).resize((size, size), Image.Resampling.BILINEAR)).reshape(size, size, -1)
