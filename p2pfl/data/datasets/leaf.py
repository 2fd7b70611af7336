"""``--dataset leaf:PATH``: LEAF's JSON (Caldas et al. 2018, "LEAF: A Benchmark for Federated Settings"), text in
Shakespeare's format, as token sequences (next-character prediction) with each sample's user.

A LEAF file is ``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...], "y": [...]}}}``; in
Shakespeare's format every x is a string of T characters (80 in LEAF) and its y the character after them. PATH is
a folder as LEAF writes it, ``train/*.json`` and ``test/*.json`` (the files read in sorted order, users in each
file's order), or one such JSON file with ``--test-split FRACTION`` (samples held out, drawn by --split-seed). A
sample becomes the T + 1 token ids of x followed by y (its label: y's id). The vocabulary: the training text's
characters (x and y) sorted by code point, ids 0..V−2, then the unknown token ``<unk>`` (id V−1) that a test
character no training text has becomes; the classes are the vocabulary. Each training sample keeps its user
(`Arrays.groups`, users numbered in the order read) for ``--partition natural``. Every rank reads the files (no
cache); the manifest records the vocabulary, the users, the unknown test characters and the digest. FEMNIST's and
Sent140's x (pixel lists, tweet records) are refused in one line: this reader takes Shakespeare's strings.

    shakespeare/train/all_data_niid_0_keep_0_train_9.json  shakespeare/test/all_data_niid_0_keep_0_test_9.json
    python -m p2pfl.run --algorithm fedavg --model char-lstm --dataset leaf:shakespeare --partition natural
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from p2pfl.capabilities import TOKENS
from p2pfl.data.datasets._base import DATASETS, Arrays
from p2pfl.data.datasets._own import OwnFiles, digest

UNKNOWN = "<unk>"


@DATASETS.register("leaf", argument="PATH")
class Leaf(OwnFiles):
    """LEAF JSON in Shakespeare's format: 80 characters, then the next one; each sample's user kept."""

    capabilities = frozenset({TOKENS})
    what = "file or folder"
    test_set = "train/ and test/ folders of .json files"

    @classmethod
    def present(cls, path: Path) -> bool:
        return path.is_file() or (path / "train").is_dir()

    @classmethod
    def has_test(cls, path: Path) -> bool:
        return path.is_dir()

    def load(self) -> Arrays:
        path = self.located()
        if path.is_dir():
            if self.options.test_split is not None:
                raise self.fail("holds a test set of its own; leave --test-split unset")
            train, test = self.read_all(path / "train"), self.read_all(path / "test")
        else:
            if self.options.test_split is None:
                raise self.fail("is one file, no test set of its own: give --test-split FRACTION")
            train = self.read(path)
            index = np.arange(len(train[1]))
            _, kept, _, held = self.split(torch.from_numpy(index), index, self.options.test_split)
            train, test = [[train[0][i] for i in kept], train[1][kept]], [[train[0][i] for i in held], None]
        (texts, groups, users), test_texts = self.unpack(train), test[0]
        if not test_texts:
            raise self.fail("holds no test sample")
        lengths = {len(t) for t in texts + test_texts}
        if len(lengths) != 1:
            raise self.fail(f"samples have {len(lengths)} different lengths ({', '.join(map(str, sorted(lengths)[:4]))}"
                            " characters, x then y): LEAF's Shakespeare gives every x the same length")
        chars = sorted(set("".join(texts)))
        vocabulary = (*chars, UNKNOWN)
        ids = {c: i for i, c in enumerate(chars)}
        unk = len(chars)
        x_train = self.encode(texts, ids, unk)
        x_test = self.encode(test_texts, ids, unk)
        unseen = int((x_test == unk).sum())
        extra: dict[str, Any] = {
            "source": str(path.resolve()), "vocabulary": "".join(chars), "unknown_token": UNKNOWN,
            "unknown_test_characters": unseen, "sequence_length": int(x_train.shape[1]), "users": users,
            "user_samples": np.bincount(groups, minlength=len(users)).tolist(),
            "digest": digest(x_train, groups, x_test)}
        if not path.is_dir():
            extra.update(test_split=self.options.test_split, split_seed=self.options.split_seed)
        return Arrays(x_train, x_train[:, -1].copy(), x_test, x_test[:, -1].copy(), num_classes=len(vocabulary),
                      classes=vocabulary, extra=extra, groups=groups)

    def read_all(self, folder: Path) -> list:
        """The samples of every .json file of `folder` (sorted by name): [texts, users of each sample]."""
        if not folder.is_dir():
            raise self.fail(f"has no {folder.name}/ folder ({self.test_set})")
        files = sorted(folder.glob("*.json"))
        if not files:
            raise self.fail(f"{folder.name}/ holds no .json file")
        texts: list[str] = []
        users: list[str] = []
        for f in files:
            t, u = self.read(f)
            texts += t
            users += list(u)
        return [texts, np.array(users, dtype=object)]

    def read(self, file: Path) -> tuple[list[str], np.ndarray]:
        """One LEAF file's samples, checked: each x + y as one string, and each sample's user."""
        where = file.name if file != self.located() else "it"
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise self.fail(f"{where}: is not readable JSON ({type(e).__name__}: {' '.join(str(e).split())})") from None
        if not isinstance(data, dict) or not isinstance(data.get("users"), list) or not isinstance(
                data.get("user_data"), dict):
            raise self.fail(f"{where}: is not LEAF's JSON (an object with a 'users' list and a 'user_data' object)")
        counts = data.get("num_samples")
        if counts is not None and (not isinstance(counts, list) or len(counts) != len(data["users"])):
            raise self.fail(f"{where}: 'num_samples' must give one count per user ({len(data['users'])})")
        texts: list[str] = []
        users: list[str] = []
        for k, user in enumerate(data["users"]):
            record = data["user_data"].get(user)
            if not isinstance(record, dict) or not isinstance(record.get("x"), list) or not isinstance(
                    record.get("y"), list):
                raise self.fail(f"{where}: user {user!r} has no 'x' and 'y' lists in 'user_data'")
            x, y = record["x"], record["y"]
            if len(x) != len(y):
                raise self.fail(f"{where}: user {user!r} has {len(x)} x but {len(y)} y")
            if counts is not None and counts[k] != len(y):
                raise self.fail(f"{where}: user {user!r} has {len(y)} samples, 'num_samples' says {counts[k]}")
            for i, (xi, yi) in enumerate(zip(x, y)):
                if not isinstance(xi, str) or not isinstance(yi, str) or len(yi) != 1 or not xi:
                    raise self.fail(f"{where}: user {user!r} sample {i}: x must be a string and y one character "
                                    f"(Shakespeare's format), got {type(xi).__name__} and {yi!r:.20}")
                texts.append(xi + yi)
            users += [str(user)] * len(y)
        return texts, np.array(users, dtype=object)

    def unpack(self, train: list) -> tuple[list[str], np.ndarray, list[str]]:
        """The training texts, each sample's user number (users in the order first read) and the users' names."""
        texts, names = train
        if not texts:
            raise self.fail("holds no training sample")
        order: dict[str, int] = {}
        for n in names:
            order.setdefault(n, len(order))
        return texts, np.array([order[n] for n in names], dtype=np.int64), list(order)

    @staticmethod
    def encode(texts: list[str], ids: dict[str, int], unk: int) -> np.ndarray:
        """Token ids N×T of equally long texts (characters without an id: the unknown token)."""
        return np.array([[ids.get(c, unk) for c in t] for t in texts], dtype=np.int64).reshape(len(texts), -1)
