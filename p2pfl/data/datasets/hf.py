"""``--dataset hf:PATH`` (images), ``hf-table:PATH`` (feature vectors) and ``hf-text:PATH`` (token sequences): a
Hugging Face `datasets` dataset saved with ``save_to_disk``, read with ``datasets.load_from_disk`` (offline; the
optional extra ``pip install 'p2pfl-sim[hf]'``, imported only when such a dataset is read).

PATH is a ``DatasetDict`` with a ``train`` and a ``test`` split (other splits are ignored), or one with ``train``
only, or a single ``Dataset``: then the run gives ``--test-split FRACTION`` (rows held out, drawn by --split-seed).
Three names, one per kind of data, because a dataset's capabilities are its class's (a run pairs them with a method
and a model before anything is read), and a column's type says nothing of the task:
- ``hf:`` images from ``--hf-image-column`` (default: the first column of the ``Image`` feature type, else
  ``image`` or ``img``): Pillow images or arrays H×W, H×W×C (C×H×W), integers in [0, 255] or floats in [0, 1],
  of any size, resized to ``--image-size`` as folder: does (grey when every image is; grey and colour mixed are
  refused);
- ``hf-table:`` the feature vectors of ``--hf-feature-columns`` (comma-separated; default: every column but the
  label's), numbers standardised and strings one-hot encoded on the training rows as csv: does (capability FEATURES);
- ``hf-text:`` the strings of ``--hf-text-column`` (default: ``text``), each one sample of next-character prediction
  as leaf: makes them (equally long; the label is the last character; capability TOKENS).
Labels (hf:, hf-table:) come from ``--hf-label-column`` (default: the first ``ClassLabel`` column, else
``label``): integers >= 0, the class names a ClassLabel's. One rank per node reads the dataset into the data root's
cache, every rank reads that (p2pfl.data.datasets._own.CachedFiles: keyed by the folder's files' bytes, the options,
the library's and Pillow's versions); the manifest records the source, the splits' rows, the columns used and the
digest.

    DatasetDict(train=Dataset.from_dict({"img": images, "label": labels}, features=Features(
        {"img": Image(), "label": ClassLabel(names=["cat", "dog"])})), test=...).save_to_disk("pets")
    python -m p2pfl.run --algorithm fedavg --dataset hf:pets --image-size 32 --peers 8
"""
from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import numpy as np
import torch

from p2pfl.capabilities import FEATURES, TOKENS
from p2pfl.data.datasets._base import DATASETS, Arrays
from p2pfl.data.datasets._own import CHANNELS, CachedFiles, digest
from p2pfl.data.datasets.csv import categories, check_features, one_hot, standardised
from p2pfl.data.datasets.folder import GREY, resized
from p2pfl.data.datasets.leaf import characters, vocabulary_record
from p2pfl.options import Check, method_options, opt
from p2pfl.runtime.failure import reading
from p2pfl.runtime.limits import check_bytes

#: What a run without the library is told.
NEEDS = "needs the datasets package: pip install 'p2pfl-sim[hf]'"
#: The bytes a character of hf-text: takes once encoded: its int64 id, and its slot in the Python list the ids are
#: made from (p2pfl.data.datasets.leaf.characters).
TOKEN_BYTES = 16


@method_options("dataset: hf, hf-table, hf-text")
class HfOptions:
    """The columns a Hugging Face dataset's samples are read from."""

    hf_image_column: str | None = opt(None, "hf: the column of images (default: the first of the Image type, else "
                                            "'image' or 'img')", section="data")
    hf_label_column: str | None = opt(None, "hf:/hf-table: the column of labels, integers or a ClassLabel "
                                            "(default: the first ClassLabel column, else 'label')", section="data")
    hf_feature_columns: str | None = opt(None, "hf-table: the feature columns, comma-separated (default: every "
                                               "column but the label's); numbers standardised, strings one-hot, as "
                                               "csv:", section="data")
    hf_text_column: str | None = opt(None, "hf-text: the column of texts, each one sample (default: 'text')",
                                     section="data")


def available() -> bool:
    """Whether the `datasets` library can be imported (looked up, not imported: the configuration's check)."""
    try:
        return importlib.util.find_spec("datasets") is not None
    except (ImportError, ValueError):
        return False


class HfFiles(CachedFiles):
    """A dataset saved with `save_to_disk`: its splits and columns, read with `datasets.load_from_disk`, parsed once
    into the data root's cache (keyed by the folder's files' bytes, the options, the library's and Pillow's versions
    and the readers' code)."""

    Options = HfOptions
    what = "folder"
    test_set = "a 'test' split"
    libraries = ("datasets", "pillow")
    #: The options naming the columns it reads (its check refuses the others' being set).
    reads: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def present(cls, path: Path) -> bool:
        return path.is_dir()

    @classmethod
    def has_test(cls, path: Path) -> bool:
        try:
            return "test" in json.loads((path / "dataset_dict.json").read_text()).get("splits", ())
        except (OSError, ValueError, AttributeError):
            return False  # a single Dataset (or none: load says so)

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        """The library is installed; the column options given are those of this kind."""
        check(available(), "dataset", f"{cls.name}:PATH {NEEDS}")
        super().check(cfg, check)
        for name in ("hf_image_column", "hf_label_column", "hf_feature_columns", "hf_text_column"):
            check(getattr(cfg, name, None) is None or name in cls.reads, name,
                  f"--dataset {cls.name}:{cls.argument} reads no such column (its options: "
                  f"{', '.join('--' + r.replace('_', '-') for r in cls.reads)})")

    def library(self) -> ModuleType:
        """The `datasets` module, or the one-line refusal saying how to install it."""
        try:
            import datasets
        except ImportError:
            raise self.fail(NEEDS) from None
        return datasets

    def splits(self) -> dict[str, Any]:
        """The `datasets.Dataset` of the train split and, when the files hold one, of the test split."""
        datasets = self.library()
        path = self.located()
        try:
            read = datasets.load_from_disk(str(path))
        except Exception as e:  # the library's many ways of failing on a folder it did not write: one line
            raise self.fail(f"is not a dataset saved with save_to_disk ({type(e).__name__}: "
                            f"{' '.join(str(e).split())[:200]})") from None
        if isinstance(read, datasets.DatasetDict):
            if "train" not in read:
                raise self.fail(f"has no 'train' split (its splits: {', '.join(read) or 'none'})")
            found = {k: read[k] for k in ("train", "test") if k in read}
        else:
            found = {"train": read}
        if not all(len(t) for t in found.values()):
            raise self.fail(f"split '{next(k for k, t in found.items() if not len(t))}' holds no rows")
        split = self.options.test_split
        if "test" not in found and split is None:
            raise self.fail(f"holds no test set ({self.test_set}): give --test-split FRACTION")
        if "test" in found and split is not None:
            raise self.fail("holds a test set of its own; leave --test-split unset")
        return found

    def column(self, tables: dict[str, Any], wanted: str | None, option: str,
               default: Callable[[Any], str | None]) -> str:
        """The column `option` names (else the `default` one the features give), present in every split."""
        train = tables["train"]
        name = wanted if wanted is not None else default(train.features)
        if name is None:
            raise self.fail(f"has no default column for --{option} (its columns: {', '.join(train.column_names)}); "
                            f"name one with --{option}")
        for split, t in tables.items():
            if name not in t.column_names:
                raise self.fail(f"split '{split}' has no column '{name}' (--{option}); its columns: "
                                f"{', '.join(t.column_names)}")
        return name

    def values(self, tables: dict[str, Any], name: str) -> list[Any]:
        """Every row's value of column `name`, the train split's rows then the test split's (None: missing, refused
        in one line naming the split and row)."""
        out: list[Any] = []
        for split, t in tables.items():
            got = list(t[name])
            if any(v is None for v in got):
                raise self.fail(f"split '{split}' row {next(i for i, v in enumerate(got) if v is None)}, column "
                                f"'{name}': missing value")
            out += got
        return out

    def label_column(self, tables: dict[str, Any]) -> tuple[str, np.ndarray, tuple[str, ...] | None]:
        """--hf-label-column: its name, every row's label (int64) and the class names a ClassLabel gives."""
        datasets = self.library()
        name = self.column(tables, self.options.hf_label_column, "hf-label-column", lambda features: next(
            (k for k, f in features.items() if isinstance(f, datasets.ClassLabel)),
            "label" if "label" in features else None))
        feature = tables["train"].features[name]
        if isinstance(feature, datasets.ClassLabel):
            names: tuple[str, ...] | None = tuple(feature.names)
        elif isinstance(feature, datasets.Value) and feature.dtype.startswith(("int", "uint")):
            names = None
        else:
            raise self.fail(f"label column '{name}' holds {describe(feature)}, not integers or a ClassLabel (encode "
                            f"it: dataset.class_encode_column('{name}'))")
        y = self.labels(np.array(self.values(tables, name), dtype=np.int64), f"column '{name}'",
                        sum(len(t) for t in tables.values()))
        return name, y, names

    def rows(self, tables: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        """The train and test rows (positions in `values`' order): the test split's, else --test-split's draw from
        the train split; with the manifest's entries saying which."""
        n = len(tables["train"])
        if "test" in tables:
            return np.arange(n), np.arange(n, n + len(tables["test"])), {}
        index = np.arange(n)
        _, train, _, test = self.split(torch.from_numpy(index), index, self.options.test_split)
        return train, test, {"test_split": self.options.test_split, "split_seed": self.options.split_seed}

    def record(self, tables: dict[str, Any], columns: dict[str, Any]) -> dict[str, Any]:
        """The manifest's entries every kind writes: the source, the rows of each split read, the columns used."""
        return {"source": str(self.located().resolve()), "rows": {k: len(t) for k, t in tables.items()},
                "columns": columns}


@DATASETS.register("hf", argument="PATH")
class Hf(HfFiles):
    """Images and labels of a saved Hugging Face dataset, resized to --image-size."""

    reads = ("hf_image_column", "hf_label_column")

    def parse(self) -> Arrays:
        datasets = self.library()
        tables = self.splits()
        image = self.column(tables, self.options.hf_image_column, "hf-image-column", lambda features: next(
            (k for k, f in features.items() if isinstance(f, datasets.Image)),
            next((k for k in ("image", "img") if k in features), None)))
        label, y, names = self.label_column(tables)
        with reading(f"{self.where}: column '{image}'"):  # an image file it names may be missing or damaged
            decoded = {split: list(t[image]) for split, t in tables.items()}
        pictures = [self.picture(v, split, i) for split, column in decoded.items() for i, v in enumerate(column)]
        grey = [p.mode in GREY for p in pictures]
        if len(set(grey)) > 1:
            at = grey.index(not grey[0])
            raise self.fail(f"column '{image}' mixes channel counts: row {at} has {1 if grey[at] else 3}, row 0 "
                            f"{1 if grey[0] else 3} (convert them to one mode)")
        size = self.options.image_size
        self.check_images(len(pictures), 1 if grey[0] else 3, size)
        x = np.stack([resized(p, "L" if grey[0] else "RGB", size) for p in pictures]).transpose(0, 3, 1, 2)
        n = len(tables["train"])
        test = "test" in tables
        arrays = self.arrays(x[:n], y[:n], x[n:] if test else None, y[n:] if test else None, names)
        arrays.extra.update(self.record(tables, {"image": image, "label": label}), image_size=size)
        return arrays

    def picture(self, value: Any, split: str, row: int) -> Any:
        """A row's image as a Pillow image: one already, or an array H×W, H×W×C or C×H×W (C of 1, 3 or 4) of
        integers in [0, 255] (lists of a column read back as int64) or floats in [0, 1] (scaled by 255 and rounded,
        half to even, as every dataset's)."""
        from PIL import Image

        if isinstance(value, Image.Image):
            return value
        where = f"split '{split}' row {row}"
        a = np.asarray(value)
        if a.ndim == 3 and a.shape[2] not in CHANNELS and a.shape[0] in CHANNELS:
            a = a.transpose(1, 2, 0)
        if a.ndim == 3 and a.shape[2] == 1:
            a = a[:, :, 0]
        if not (a.ndim == 2 or (a.ndim == 3 and a.shape[2] in CHANNELS)) or a.size == 0:
            raise self.fail(f"{where}: an image is H×W, H×W×C or C×H×W with 1, 3 or 4 channels, got shape {a.shape}")
        if np.issubdtype(a.dtype, np.floating):
            if not (np.isfinite(a).all() and 0.0 <= a.min() <= a.max() <= 1.0):
                raise self.fail(f"{where}: float images must lie in [0, 1]")
            a = np.round(a.astype(np.float64) * 255)
        elif a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.integer) or a.min() < 0 or a.max() > 255:
            raise self.fail(f"{where}: an image must be integers in [0, 255] (uint8) or floats in [0, 1], got "
                            f"{a.dtype}")
        return Image.fromarray(np.ascontiguousarray(a.astype(np.uint8)))


@DATASETS.register("hf-table", argument="PATH")
class HfTable(HfFiles):
    """Feature vectors and labels of a saved Hugging Face dataset's columns (a table)."""

    capabilities = frozenset({FEATURES})
    reads = ("hf_label_column", "hf_feature_columns")

    def parse(self) -> Arrays:
        datasets = self.library()
        tables = self.splits()
        label, y, names = self.label_column(tables)
        train, test, split = self.rows(tables)
        given = self.options.hf_feature_columns
        wanted = ([c.strip() for c in given.split(",") if c.strip()] if given is not None else
                  [c for c in tables["train"].column_names if c != label])
        if not wanted or label in wanted:
            raise self.fail(f"--hf-feature-columns must name columns besides the label column '{label}'")
        columns, numeric, categorical = [], {}, {}
        rows, width = len(train) + len(test), 0
        for name in wanted:
            self.column(tables, name, "hf-feature-columns", lambda features: None)
            feature = tables["train"].features[name]
            kind = feature.dtype if isinstance(feature, datasets.Value) else ""
            values = self.values(tables, name)
            none = np.zeros(len(values), dtype=bool)
            if kind.startswith(("int", "uint", "float", "bool")):
                check_features(self.where, name, 1, rows, width)
                column, mean, std = standardised(np.array(values, dtype=np.float64)[np.r_[train, test]],
                                                 np.arange(len(train)), none)
                numeric[name] = [mean, std]
            elif kind in ("string", "large_string"):
                ordered = [values[i] for i in np.r_[train, test]]
                categorical[name] = categories(ordered, np.arange(len(train)), none)
                check_features(self.where, name, len(categorical[name]), rows, width)
                column = one_hot(ordered, categorical[name], none)
            else:
                raise self.fail(f"feature column '{name}' holds {describe(feature)}, not numbers or strings")
            columns.append(column)
            width += column.shape[1]
        x = np.concatenate(columns, axis=1, dtype=np.float32)
        if not np.isfinite(x).all():
            raise self.fail("a feature column holds NaN or infinite values")
        x_train, x_test = x[:len(train)], x[len(train):]
        y_train, y_test = y[train], y[test]
        top = int(max(y_train.max(), y_test.max()))
        if names is not None and top >= len(names):
            raise self.fail(f"labels reach {top} but the ClassLabel names {len(names)} classes")
        extra = {**self.record(tables, {"label": label, "features": wanted}), **split, "features": int(x.shape[1]),
                 "numeric": numeric, "categorical": categorical, "digest": digest(x_train, y_train, x_test, y_test)}
        return Arrays(x_train, y_train, x_test, y_test, num_classes=len(names) if names else top + 1, classes=names,
                      extra=extra)


@DATASETS.register("hf-text", argument="PATH")
class HfText(HfFiles):
    """Texts of a saved Hugging Face dataset as token sequences, each text one sample of next-character
    prediction."""

    capabilities = frozenset({TOKENS})
    reads = ("hf_text_column",)

    def parse(self) -> Arrays:
        datasets = self.library()
        tables = self.splits()
        name = self.column(tables, self.options.hf_text_column, "hf-text-column",
                           lambda features: "text" if "text" in features else None)
        feature = tables["train"].features[name]
        if not (isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")):
            raise self.fail(f"text column '{name}' holds {describe(feature)}, not strings")
        texts = self.values(tables, name)
        lengths = sorted({len(t) for t in texts})
        if len(lengths) != 1 or lengths[0] < 2:
            shown = ", ".join(map(str, lengths[:4]))
            raise self.fail(f"texts of column '{name}' have {len(lengths)} length(s) ({shown} characters): each is "
                            "one sample, all equally long (at least 2), its last character the label, as leaf: reads "
                            "them")
        check_bytes(f"{self.where}: {len(texts)} texts of {lengths[0]} characters as token ids",
                    len(texts) * lengths[0] * TOKEN_BYTES)
        train, test, split = self.rows(tables)
        x_train, x_test, vocabulary = characters([texts[i] for i in train], [texts[i] for i in test])
        extra = {**self.record(tables, {"text": name}), **split, **vocabulary_record(vocabulary, x_test),
                 "digest": digest(x_train, x_test)}
        return Arrays(x_train, x_train[:, -1].copy(), x_test, x_test[:, -1].copy(), num_classes=len(vocabulary),
                      classes=vocabulary, extra=extra)


def describe(feature: Any) -> str:
    """A feature type in a message: a Value's dtype ("string"), else its type's name ("Image", "List")."""
    dtype = getattr(feature, "dtype", None)
    return f"{type(feature).__name__}({dtype})" if isinstance(dtype, str) else type(feature).__name__
