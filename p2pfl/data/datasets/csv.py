"""``--dataset csv:PATH``: a table of one's own, one example a row, as feature vectors (tabular classification).

The file: a header row naming the columns, then one row per example (the csv module's default dialect: commas,
double quotes; UTF-8). ``--label-column NAME`` (default: the last column) holds the labels; its distinct values
are the classes, sorted (as integers when every label is one, else as strings) and numbered 0..C-1, their names
recorded. Every other column is a feature: numeric when every value is a number, standardised with the mean and
(population, ddof 0) standard deviation of the training rows (a constant column becomes 0); categorical when no
value is, one-hot encoded over the categories of the training rows in sorted order (a test row whose category no
training row has gets all zeros; the manifest counts them, ``unseen_categories``). A column mixing numbers and text
is refused, naming the line of the first value of the rarer kind. The features keep the file's column order.

Missing values (an empty field, NA, N/A, NaN, null, None, ?) are refused in one line naming the file, the line and
the column, unless ``--impute mean``: a missing number then takes the training rows' mean (0 once standardised), a
missing category no one-hot entry. A missing label is always refused. The file holds no test set:
``--test-split FRACTION`` holds rows out (drawn by ``--split-seed``) before any statistic is computed. The file is
parsed once into the data root's cache (p2pfl.data.datasets._own.CachedFiles: one rank per node parses, every rank
reads the arrays; keyed by the file's bytes and the options); the manifest records its digest, the statistics and
the categories. A categorical column of more than MAX_CATEGORIES categories is refused, and so is a table whose
rows or features would take more than the memory budget (p2pfl.runtime.limits), before they are held.
``--natural-column NAME`` names a column whose values are the rows' natural groups (a writer, a hospital:
``--partition natural`` gives each peer whole groups); it is no feature, a training row's group may not be
missing, and the manifest records the values (``natural_groups``, numbered in the order the training rows show them).

    label,age,smoker,weight
    healthy,41,no,70.5
    ill,67,yes,88.0
    python -m p2pfl.run --algorithm fedavg --model mlp --dataset csv:patients.csv --test-split 0.2 --peers 8
"""
from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from p2pfl.capabilities import FEATURES
from p2pfl.data.datasets._base import DATASETS, MAX_CLASSES, Arrays
from p2pfl.data.datasets._own import CachedFiles, digest
from p2pfl.runtime.limits import check_bytes, max_bytes

#: The values read as missing (compared without case and surrounding spaces).
MISSING = frozenset({"", "na", "n/a", "nan", "null", "none", "?"})
#: The most categories a one-hot column may have: a column of more is an identifier or free text, no feature (each
#: category is a feature only the rows holding it train), and 10 000 already take 80 kB a row as float64.
MAX_CATEGORIES = 10_000
#: The bytes a feature value takes while the features are built: float64 in its column, float32 in the result.
FEATURE_BYTES = 8 + 4
#: The bytes a field of the file takes once read, besides its characters: its Python string and list slot, and
#: what parsing its column makes of it (measured: 50 to 110 bytes a field for tables of short numbers, long
#: numbers and categories).
FIELD_BYTES = 96


def number(text: str) -> float | None:
    """The finite number `text` writes, else None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def standardised(a: np.ndarray, train: np.ndarray, missing: np.ndarray) -> tuple[np.ndarray, float, float]:
    """A numeric column (float64, a value per row) standardised with the mean and population std of its training
    rows' values, as N×1 (a missing value takes the mean, so 0; a constant column becomes 0), and that mean and
    std: how a tabular dataset's numbers become features."""
    seen = a[train][~missing[train]]
    mean, std = float(seen.mean()), float(seen.std())
    a = np.where(missing, mean, a)
    return ((a - mean) / (std if std > 0 else 1.0))[:, None], mean, std


def categories(values: list[str], train: np.ndarray, missing: np.ndarray) -> list[str]:
    """A categorical column's categories: its training rows' values, sorted."""
    return sorted({values[i] for i in train if not missing[i]})


def one_hot(values: list[str], cats: list[str], missing: np.ndarray) -> np.ndarray:
    """A categorical column one-hot encoded over `cats` (`categories`), as N×K float64 (a missing value, or a
    category not in `cats`, gets all zeros)."""
    where = {c: k for k, c in enumerate(cats)}
    onehot = np.zeros((len(values), len(cats)), dtype=np.float64)
    for i, v in enumerate(values):
        if v in where and not missing[i]:
            onehot[i, where[v]] = 1.0
    return onehot


def check_features(what: str, column: str, width: int, rows: int, before: int) -> None:
    """Refuse, before it is built, a feature column of `width` features (one-hot: its categories, over
    MAX_CATEGORIES) that takes the `rows` × (`before` + `width`) features past the memory budget (ValueError
    naming `what`, the dataset's file)."""
    if width > MAX_CATEGORIES:
        raise ValueError(f"{what}: column '{column}' has {width} categories, over the limit of {MAX_CATEGORIES} for a "
                         "one-hot feature (an identifier or free text: leave it out, or encode it yourself)")
    check_bytes(f"{what}: {rows} rows of {before + width} features (column '{column}' one-hot to {width})"
                if width > 1 else f"{what}: {rows} rows of {before + width} features",
                rows * (before + width) * FEATURE_BYTES)


@DATASETS.register("csv", argument="PATH")
class Csv(CachedFiles):
    """Rows of a CSV file with a header: numeric columns standardised, categorical ones one-hot encoded."""

    capabilities = frozenset({FEATURES})
    test_set = "a CSV file is one table"

    def parse(self) -> Arrays:
        header, rows, lines = self.table(self.located())
        label = self.label_index(header)
        names, y = self.classes(header[label], [r[label] for r in rows], lines)
        if self.options.test_split is None:
            raise self.fail(f"holds no test set ({self.test_set}): give --test-split FRACTION")
        index = np.arange(len(rows))
        _, train, _, test = self.split(torch.from_numpy(index), index, self.options.test_split)
        natural, groups, group_names = self.natural(header, label, rows, lines, train)
        columns: list[np.ndarray] = []
        numeric: dict[str, list[float]] = {}
        categorical: dict[str, list[str]] = {}
        unseen: dict[str, int] = {}
        width = 0  # the features of the columns built so far
        for j, name in enumerate(header):
            if j in (label, natural):
                continue
            values = [r[j].strip() for r in rows]
            missing = np.array([v.lower() in MISSING for v in values])
            if missing.any() and self.options.impute == "none":
                at = int(np.flatnonzero(missing)[0])
                raise self.fail(f"line {lines[at]}, column '{name}': missing value (fill it, or --impute mean)")
            if missing[train].all():
                raise self.fail(f"column '{name}' has no value in the training rows")
            numbers = [number(v) for v in values]
            is_number = np.array([n is not None for n in numbers]) & ~missing
            if is_number[~missing].all():
                check_features(self.where, name, 1, len(rows), width)
                a = np.array([math.nan if n is None else n for n in numbers], dtype=np.float64)
                column, mean, std = standardised(a, train, missing)
                columns.append(column)
                numeric[name] = [mean, std]
            elif is_number.any():
                rare = is_number if is_number.sum() * 2 <= (~missing).sum() else ~is_number & ~missing
                at = int(np.flatnonzero(rare)[0])
                raise self.fail(f"column '{name}' mixes numbers and text (line {lines[at]}: '{values[at]}'); a "
                                "feature column is all numbers (standardised) or all text (one-hot)")
            else:
                cats = categories(values, train, missing)
                check_features(self.where, name, len(cats), len(rows), width)
                columns.append(one_hot(values, cats, missing))
                categorical[name] = cats
                known = set(cats)
                new = sum(1 for i in test if not missing[i] and values[i] not in known)
                if new:
                    unseen[name] = new
            width += columns[-1].shape[1]
        if not columns:
            raise self.fail(f"holds no feature column besides the label column '{header[label]}'")
        x = np.concatenate(columns, axis=1, dtype=np.float32)
        x_train, x_test = x[train], x[test]
        y_train, y_test = y[train], y[test]
        extra: dict[str, Any] = {
            "source": str(self.located().resolve()), "test_split": self.options.test_split,
            "split_seed": self.options.split_seed, "label_column": header[label], "features": int(x.shape[1]),
            "digest": digest(x_train, y_train, x_test, y_test), "numeric": numeric, "categorical": categorical,
            "impute": self.options.impute}
        if unseen:
            extra["unseen_categories"] = unseen
        if natural is not None:
            extra.update(natural_column=header[natural], natural_groups=group_names)
        return Arrays(x_train, y_train, x_test, y_test, num_classes=len(names), classes=names, extra=extra,
                      groups=groups)

    def natural(self, header: list[str], label: int, rows: list[list[str]], lines: list[int], train: np.ndarray
                ) -> tuple[int | None, np.ndarray | None, list[str]]:
        """--natural-column: its position, each training row's group (numbered in the order the training rows
        show them) and the groups' values; (None, None, []) without it."""
        wanted = self.options.natural_column
        if wanted is None:
            return None, None, []
        if wanted not in header:
            raise self.fail(f"has no column '{wanted}' (--natural-column); its columns: {', '.join(header)}")
        j = header.index(wanted)
        if j == label:
            raise self.fail(f"column '{wanted}' is the label column; --natural-column names another")
        values = [rows[i][j].strip() for i in train]
        for i, v in zip(train, values):
            if v.lower() in MISSING:
                raise self.fail(f"line {lines[i]}, column '{wanted}': missing natural group")
        order: dict[str, int] = {}
        for v in values:
            order.setdefault(v, len(order))
        return j, np.array([order[v] for v in values], dtype=np.int64), list(order)

    def table(self, path: Path) -> tuple[list[str], list[list[str]], list[int]]:
        """The header, the rows (each as long as the header) and each row's line in the file; refused as soon as
        the rows read would take more than the memory budget (FIELD_BYTES a field besides its characters)."""
        budget, held = max_bytes(), 0
        try:
            with open(path, newline="", encoding="utf-8-sig") as f:
                reader = csv.reader(f)
                header = next(reader, None)
                rows, lines = [], []
                for row in reader:
                    if not row:
                        continue  # a blank line
                    if header is not None and len(row) != len(header):
                        raise self.fail(f"line {reader.line_num} has {len(row)} fields, the header {len(header)}")
                    held += FIELD_BYTES * len(row) + sum(map(len, row))
                    check_bytes(f"{self.where}: its rows up to line {reader.line_num}", held, budget)
                    rows.append(row)
                    lines.append(reader.line_num)
        except UnicodeDecodeError:
            raise self.fail("is not UTF-8 text") from None
        except csv.Error as e:
            raise self.fail(f"is not readable CSV ({' '.join(str(e).split())})") from None
        except OSError as e:
            raise self.fail(f"cannot be read ({type(e).__name__}: {' '.join(str(e).split())})") from None
        if header is None:
            raise self.fail("is empty (a header row naming the columns, then one row per example)")
        header = [h.strip() for h in header]
        twice = sorted({h for h in header if header.count(h) > 1})
        if twice:
            raise self.fail(f"names column(s) {', '.join(repr(h) for h in twice)} twice in its header")
        if not rows:
            raise self.fail("holds a header but no rows")
        return header, rows, lines

    def label_index(self, header: list[str]) -> int:
        """The label column's position: --label-column, else the last."""
        wanted = self.options.label_column
        if wanted is None:
            return len(header) - 1
        if wanted not in header:
            raise self.fail(f"has no column '{wanted}' (--label-column); its columns: {', '.join(header)}")
        return header.index(wanted)

    def classes(self, column: str, values: list[str], lines: list[int]) -> tuple[tuple[str, ...], np.ndarray]:
        """The classes' names, sorted (as integers when every label is one), and every row's label 0..C-1."""
        values = [v.strip() for v in values]
        for v, line in zip(values, lines):
            if v.lower() in MISSING:
                raise self.fail(f"line {line}, column '{column}': missing label")
        distinct = set(values)
        if len(distinct) > MAX_CLASSES:
            raise self.fail(f"label column '{column}' has {len(distinct)} distinct values, over the limit of "
                            f"{MAX_CLASSES} classes")
        try:
            names = sorted(distinct, key=int)
        except ValueError:
            names = sorted(distinct)
        index = {c: k for k, c in enumerate(names)}
        return tuple(names), np.array([index[v] for v in values], dtype=np.int64)
