"""``--dataset sent140:PATH``: LEAF's Sent140 (Caldas et al. 2018; Go et al. 2009's Sentiment140 tweets grouped by
their author), text classification: a tweet's characters as a token sequence with one label, its sentiment.

LEAF's layout, PATH and the users: p2pfl.data.datasets._leaf. Every x is a tweet's record as LEAF writes it, a list
whose last entry is the text (LEAF: id, date, query, user, text); every y its class, an integer >= 0 (LEAF: 0
negative, 1 positive). A text becomes its first ``--max-length`` characters (80 by default; a longer one is cut),
then the padding token up to that length: int64 N×T, T = --max-length (capability SEQUENCE_LABELS). The vocabulary,
as leaf: builds it: the training texts' characters (as cut) sorted by code point, ids 0..V−3, then the unknown token
``<unk>`` (V−2) that a test character no training text has becomes, then the padding token ``<pad>`` (V−1). The
classes are counted from the labels, at least 2. Each training sample keeps its user for ``--partition natural``.
The files are parsed once into the data root's cache (p2pfl.data.datasets._own.CachedFiles); the manifest records
the vocabulary, the users, the cut texts, the unknown test characters and the digest.

    sent140/train/all_data_niid_0_keep_0_train_9.json  sent140/test/all_data_niid_0_keep_0_test_9.json
    python -m p2pfl.run --algorithm fedavg --model char-lstm --dataset sent140:sent140 --partition natural
"""
from __future__ import annotations

from typing import Any

import numpy as np

from p2pfl.capabilities import SEQUENCE_LABELS
from p2pfl.data.datasets._base import DATASETS, MAX_CLASSES, Arrays
from p2pfl.data.datasets._leaf import LeafFiles, shown
from p2pfl.data.datasets._own import digest
from p2pfl.runtime.limits import check_bytes

UNKNOWN, PADDING = "<unk>", "<pad>"


@DATASETS.register("sent140", argument="PATH")
class Sent140(LeafFiles):
    """LEAF JSON in Sent140's format: a tweet's record (its text last) and a class; each sample's user kept."""

    capabilities = frozenset({SEQUENCE_LABELS})
    layout = "sent140"

    def parse(self) -> Arrays:
        train, test = self.samples()
        groups, users = self.users(train)
        length = self.options.max_length
        cut = sum(len(t) > length for t in train.x + test.x)
        check_bytes(f"{self.where}: {len(train.x) + len(test.x)} texts of --max-length {length} token ids",
                    (len(train.x) + len(test.x)) * length * 8)
        texts, test_texts = [t[:length] for t in train.x], [t[:length] for t in test.x]
        chars = sorted(set("".join(texts)))
        vocabulary = (*chars, UNKNOWN, PADDING)
        ids = {c: i for i, c in enumerate(chars)}
        unk, pad = len(chars), len(chars) + 1
        x_train, x_test = self.encode(texts, ids, unk, pad, length), self.encode(test_texts, ids, unk, pad, length)
        y_train, y_test = np.array(train.y, dtype=np.int64), np.array(test.y, dtype=np.int64)
        extra: dict[str, Any] = {
            **self.record(), "vocabulary": "".join(chars), "unknown_token": UNKNOWN, "padding_token": PADDING,
            "max_length": length, "cut_texts": int(cut), "unknown_test_characters": int((x_test == unk).sum()),
            "users": users, "user_samples": np.bincount(groups, minlength=len(users)).tolist(),
            "digest": digest(x_train, y_train, groups, x_test, y_test)}
        top = int(max(y_train.max(), y_test.max()))
        return Arrays(x_train, y_train, x_test, y_test, num_classes=max(2, top + 1), extra=extra, groups=groups,
                      vocabulary=vocabulary, padding=pad)

    def take(self, x: list, y: list, where: str, user: str) -> tuple[list, list]:
        """Each sample's text (the record's last entry) and its class."""
        for i, (xi, yi) in enumerate(zip(x, y)):
            if not isinstance(xi, list) or not xi or not isinstance(xi[-1], str):
                got = f"a list ending in {type(xi[-1]).__name__}" if isinstance(xi, list) and xi else (
                    "an empty list" if isinstance(xi, list) else f"a {type(xi).__name__}")
                raise self.wrong(where, user, i, xi, f"x must be a tweet's record, a list whose last entry is its "
                                                     f"text (Sent140's format), got {got}")
            if not isinstance(yi, int) or isinstance(yi, bool) or not 0 <= yi < MAX_CLASSES:
                raise self.wrong(where, user, i, xi, f"y must be a class, an integer in [0, {MAX_CLASSES}) (Sent140: "
                                                     f"0 negative, 1 positive), got {shown(yi)}")
        return [xi[-1] for xi in x], list(y)

    @staticmethod
    def encode(texts: list[str], ids: dict[str, int], unk: int, pad: int, length: int) -> np.ndarray:
        """Token ids N×length: each text's characters (without an id: the unknown token), then padding."""
        out = np.full((len(texts), length), pad, dtype=np.int64)
        for row, t in zip(out, texts):
            row[:len(t)] = [ids.get(c, unk) for c in t]
        return out
