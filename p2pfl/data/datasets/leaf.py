"""``--dataset leaf:PATH``: LEAF's JSON (Caldas et al. 2018, "LEAF: A Benchmark for Federated Settings"), text in
Shakespeare's format, as token sequences (next-character prediction) with each sample's user.

LEAF's layout, PATH and the users: p2pfl.data.datasets._leaf. In Shakespeare's format every x is a string of T
characters (80 in LEAF) and its y the character after them. A sample becomes the T + 1 token ids of x followed by
y (its label: y's id). The vocabulary: the training text's characters (x and y) sorted by code point, ids 0..V−2,
then the unknown token ``<unk>`` (id V−1) that a test character no training text has becomes; the classes are the
vocabulary. Each training sample keeps its user for ``--partition natural``. The files are parsed once into the
data root's cache (p2pfl.data.datasets._own.CachedFiles); the manifest records the vocabulary, the users, the
unknown test characters and the digest. FEMNIST's and Sent140's files (x pixel lists, tweet records) are refused in
one line naming femnist:PATH and sent140:PATH, which read them.

    shakespeare/train/all_data_niid_0_keep_0_train_9.json  shakespeare/test/all_data_niid_0_keep_0_test_9.json
    python -m p2pfl.run --algorithm fedavg --model char-lstm --dataset leaf:shakespeare --partition natural
"""
from __future__ import annotations

from typing import Any

import numpy as np

from p2pfl.capabilities import TOKENS
from p2pfl.data.datasets._base import DATASETS, Arrays
from p2pfl.data.datasets._leaf import LeafFiles, shown
from p2pfl.data.datasets._own import digest

UNKNOWN = "<unk>"


@DATASETS.register("leaf", argument="PATH")
class Leaf(LeafFiles):
    """LEAF JSON in Shakespeare's format: 80 characters, then the next one; each sample's user kept."""

    capabilities = frozenset({TOKENS})
    layout = "shakespeare"

    def parse(self) -> Arrays:
        train, test = self.samples()
        texts, test_texts = train.x, test.x
        groups, users = self.users(train)
        lengths = {len(t) for t in texts + test_texts}
        if len(lengths) != 1:
            raise self.fail(f"samples have {len(lengths)} different lengths ({', '.join(map(str, sorted(lengths)[:4]))}"
                            " characters, x then y): LEAF's Shakespeare gives every x the same length")
        x_train, x_test, vocabulary = characters(texts, test_texts)
        extra: dict[str, Any] = {
            **self.record(), **vocabulary_record(vocabulary, x_test), "users": users,
            "user_samples": np.bincount(groups, minlength=len(users)).tolist(),
            "digest": digest(x_train, groups, x_test)}
        return Arrays(x_train, x_train[:, -1].copy(), x_test, x_test[:, -1].copy(), num_classes=len(vocabulary),
                      classes=vocabulary, extra=extra, groups=groups)

    def take(self, x: list, y: list, where: str, user: str) -> tuple[list, list]:
        """Each sample's x + y as one string (x a string, y one character)."""
        texts = []
        for i, (xi, yi) in enumerate(zip(x, y)):
            if not isinstance(xi, str) or not isinstance(yi, str) or len(yi) != 1 or not xi:
                raise self.wrong(where, user, i, xi, f"x must be a string and y one character (Shakespeare's "
                                                     f"format), got {type(xi).__name__} and {shown(yi)}")
            texts.append(xi + yi)
        return texts, [t[-1] for t in texts]



def characters(texts: list[str], test_texts: list[str]) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """Equally long texts as token ids for next-character prediction (each text one sample, its last character the
    label): the training and test ids N×T and the vocabulary, the training texts' characters sorted by code point
    (ids 0..V−2), then `UNKNOWN` (id V−1), which a test character no training text has becomes."""
    chars = sorted(set("".join(texts)))
    ids = {c: i for i, c in enumerate(chars)}
    unk = len(chars)

    def encode(t: list[str]) -> np.ndarray:
        return np.array([[ids.get(c, unk) for c in s] for s in t], dtype=np.int64).reshape(len(t), -1)

    return encode(texts), encode(test_texts), (*chars, UNKNOWN)


def vocabulary_record(vocabulary: tuple[str, ...], x_test: np.ndarray) -> dict[str, Any]:
    """The manifest's entries of a `characters` vocabulary: its characters, the unknown token, how many test
    characters it stands for, the sequence length."""
    return {"vocabulary": "".join(vocabulary[:-1]), "unknown_token": UNKNOWN,
            "unknown_test_characters": int((x_test == len(vocabulary) - 1).sum()),
            "sequence_length": int(x_test.shape[1])}
