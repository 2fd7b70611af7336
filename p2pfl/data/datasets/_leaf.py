"""What the readers of LEAF's JSON share (Caldas et al. 2018, "LEAF: A Benchmark for Federated Settings"):
``leaf:PATH`` (Shakespeare), ``femnist:PATH`` and ``sent140:PATH``, one component file each.

A LEAF file is ``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...], "y": [...]}}}``. PATH is a
folder as LEAF writes it, ``train/*.json`` and ``test/*.json`` (the files read in sorted order, users in each file's
order), or one such JSON file with ``--test-split FRACTION`` (samples held out, drawn by --split-seed). Each training
sample keeps its user (`Arrays.groups`, users numbered in the order read) for ``--partition natural``.

The three formats are told apart by a sample's x (`layout_of`): a string is Shakespeare's (y the next character), a
list of 784 numbers FEMNIST's (a 28×28 grey image, y its class), a list whose last entry is a string Sent140's (the
tweet's record, its text last; y its sentiment). A reader given another format's file names the dataset that reads
it; a sample of none of them is refused, naming the file, the user and the sample.

The files are parsed once into the data root's cache (p2pfl.data.datasets._own.CachedFiles: one rank per node
parses, every rank reads the arrays; keyed by the JSON files' bytes, the options and the readers' code). Files whose
parse would take more than the memory budget (JSON_BYTES a byte) are refused before they are read; a document
nested too deeply, or holding a number no int64 holds, is one line naming the file.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from numbers import Real
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from p2pfl.data.datasets._base import DATASETS
from p2pfl.data.datasets._own import CachedFiles
from p2pfl.runtime.limits import check_bytes, human

#: The formats a sample's x tells apart (`layout_of`), as messages name them.
LAYOUTS = {"shakespeare": "Shakespeare's format (x a string)",
           "femnist": "FEMNIST's format (x 784 pixel values)",
           "sent140": "Sent140's format (x a tweet's record, its text last)"}
PIXELS = 28 * 28
#: The bytes parsing takes per byte of LEAF's JSON: the document's Python objects and what a format makes of them
#: (measured: about 4 for FEMNIST's pixel lists, 11 for Sent140's records, 15 for Shakespeare's characters, each
#: one an int64 id once read through a Python list). The files are refused before reading past the memory budget.
JSON_BYTES = 16


def shown(value: Any) -> str:
    """A sample's value as a message quotes it: its repr, cut to 20 characters with "..." (a label of 10**30 is not
    shown as 10**19)."""
    text = repr(value)
    return text if len(text) <= 20 else text[:17] + "..."


def layout_of(x: Any) -> str | None:
    """The LEAF format a sample's x is in: "shakespeare", "femnist", "sent140", or None for none of them."""
    if isinstance(x, str):
        return "shakespeare"
    if isinstance(x, list) and len(x) == PIXELS and all(isinstance(v, Real) and not isinstance(v, bool) for v in x):
        return "femnist"
    if isinstance(x, list) and x and isinstance(x[-1], str):
        return "sent140"
    return None


@dataclass
class Samples:
    """Samples read from LEAF files: what each format's `take` made of x and y, and each sample's user."""

    x: list
    y: list
    users: list[str]

    def __getitem__(self, index: np.ndarray) -> Samples:
        return Samples([self.x[i] for i in index], [self.y[i] for i in index], [self.users[i] for i in index])


class LeafFiles(CachedFiles):
    """LEAF's JSON layout; a subclass reads one format: its `layout`, `take` and `parse`."""

    what = "file or folder"
    test_set = "train/ and test/ folders of .json files"
    #: The format it reads (a key of LAYOUTS).
    layout: ClassVar[str] = ""

    @classmethod
    def present(cls, path: Path) -> bool:
        return path.is_file() or (path / "train").is_dir()

    @classmethod
    def has_test(cls, path: Path) -> bool:
        return path.is_dir()

    def sources(self) -> list[Path]:
        """The JSON files read: train/*.json and test/*.json of a folder (LEAF's own folder holds far more), or the
        one file."""
        path = self.located()
        if not path.is_dir():
            return [path]
        return [f for part in ("train", "test") for f in sorted((path / part).glob("*.json")) if f.is_file()]

    def take(self, x: list, y: list, where: str, user: str) -> tuple[list, list]:
        """One user's samples in this format, checked (`wrong` for the first that is not): (xs, ys)."""
        raise NotImplementedError

    def samples(self) -> tuple[Samples, Samples]:
        """The train and test samples: train/ and test/ of a folder, or one file's split by --test-split."""
        path = self.located()
        size = sum(f.stat().st_size for f in self.sources())
        check_bytes(f"{self.where}: {human(size)} of JSON, parsed into about {JSON_BYTES} times as much",
                    size * JSON_BYTES)
        if path.is_dir():
            if self.options.test_split is not None:
                raise self.fail("holds a test set of its own; leave --test-split unset")
            train, test = self.read_all(path / "train"), self.read_all(path / "test")
        else:
            if self.options.test_split is None:
                raise self.fail("is one file, no test set of its own: give --test-split FRACTION")
            train = self.read(path)
            index = np.arange(len(train.y))
            _, kept, _, held = self.split(torch.from_numpy(index), index, self.options.test_split)
            train, test = train[kept], train[held]
        if not train.y:
            raise self.fail("holds no training sample")
        if not test.y:
            raise self.fail("holds no test sample")
        return train, test

    def record(self) -> dict[str, Any]:
        """The manifest's entries every LEAF reader gives: the source, and the held-out split when one was drawn."""
        path = self.located()
        extra: dict[str, Any] = {"source": str(path.resolve())}
        if not path.is_dir():
            extra.update(test_split=self.options.test_split, split_seed=self.options.split_seed)
        return extra

    @staticmethod
    def users(train: Samples) -> tuple[np.ndarray, list[str]]:
        """Each training sample's user number (users in the order first read) and the users' names."""
        order: dict[str, int] = {}
        for n in train.users:
            order.setdefault(n, len(order))
        return np.array([order[n] for n in train.users], dtype=np.int64), list(order)

    def read_all(self, folder: Path) -> Samples:
        """The samples of every .json file of `folder` (sorted by name)."""
        if not folder.is_dir():
            raise self.fail(f"has no {folder.name}/ folder ({self.test_set})")
        files = sorted(folder.glob("*.json"))
        if not files:
            raise self.fail(f"{folder.name}/ holds no .json file")
        out = Samples([], [], [])
        for f in files:
            s = self.read(f)
            out.x += s.x
            out.y += s.y
            out.users += s.users
        return out

    def read(self, file: Path) -> Samples:
        """One LEAF file's samples, checked."""
        where = file.name if file != self.located() else "it"
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except RecursionError:
            raise self.fail(f"{where}: is not readable JSON (nested too deeply)") from None
        except (OSError, ValueError) as e:  # JSONDecodeError, UnicodeDecodeError; an integer of over 4300 digits
            raise self.fail(f"{where}: is not readable JSON ({type(e).__name__}: "
                            f"{' '.join(str(e).split())[:200]})") from None
        if not isinstance(data, dict) or not isinstance(data.get("users"), list) or not isinstance(
                data.get("user_data"), dict):
            raise self.fail(f"{where}: is not LEAF's JSON (an object with a 'users' list and a 'user_data' object)")
        counts = data.get("num_samples")
        if counts is not None and (not isinstance(counts, list) or len(counts) != len(data["users"])):
            raise self.fail(f"{where}: 'num_samples' must give one count per user ({len(data['users'])})")
        out = Samples([], [], [])
        for k, user in enumerate(data["users"]):
            if not isinstance(user, str):
                raise self.fail(f"{where}: 'users' must list names (strings), entry {k} is {type(user).__name__}")
            record = data["user_data"].get(user)
            if not isinstance(record, dict) or not isinstance(record.get("x"), list) or not isinstance(
                    record.get("y"), list):
                raise self.fail(f"{where}: user {user!r} has no 'x' and 'y' lists in 'user_data'")
            x, y = record["x"], record["y"]
            if len(x) != len(y):
                raise self.fail(f"{where}: user {user!r} has {len(x)} x but {len(y)} y")
            if counts is not None and counts[k] != len(y):
                raise self.fail(f"{where}: user {user!r} has {len(y)} samples, 'num_samples' says {counts[k]}")
            xs, ys = self.take(x, y, where, str(user))
            out.x += xs
            out.y += ys
            out.users += [str(user)] * len(ys)
        return out

    def wrong(self, where: str, user: str, i: int, x: Any, what: str) -> ValueError:
        """The one-line error of a sample this format cannot read: `what` it must be, and the dataset that reads
        the format its x is in (or that it is in none of LEAF's)."""
        message = f"{where}: user {user!r} sample {i}: {what}"
        kind = layout_of(x)
        if kind is None:
            message += f"; its x is in none of LEAF's formats ({', '.join(LAYOUTS.values())})"
        elif kind != self.layout:
            readers = [n for n in DATASETS.names() if getattr(DATASETS.get(n), "layout", None) == kind]
            message += f"; it is in {LAYOUTS[kind]}: read it with {' or '.join(f'--dataset {n}:PATH' for n in readers)}"
        return self.fail(message)
