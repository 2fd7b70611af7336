"""A Shakespeare-style LEAF data set, generated: `python scripts/leaf_text.py OUT [--users 8] [--length 80]
[--seed 0]` writes OUT/train/data.json and OUT/test/data.json in LEAF's format (docs/data.md, leaf:PATH).

Each user is a speaker whose lines come from its own word-level Markov chain: a shared list of 40 words, each
followed in that speaker's chain by one of 3 successors (drawn per speaker, uniform), lines of 4 to 9 words ending
in '.', '!' or '?', then a space. A user's text is cut as LEAF cuts Shakespeare: every window of `length`
characters (stride 1) is an x, the next character its y; the last fifth of a user's samples (in text order) are
its test samples. Users speak different amounts (text of 300 to 900 characters, drawn per user). Text has
structure a model can learn (spelling inside words, each speaker's word order), so a next-character model beats the
unigram baseline by far. Nothing here is random but for `numpy.random.default_rng(seed)`.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

WORDS = ("thou", "art", "my", "lord", "and", "the", "king", "doth", "speak", "of", "love", "death", "fair",
         "night", "sweet", "prince", "good", "morrow", "what", "is", "this", "noble", "heart", "shall", "we",
         "go", "hence", "o", "heaven", "tis", "true", "mine", "honour", "come", "away", "stay", "soft", "hark",
         "friends", "madam")


def speaker_text(rng: np.random.Generator, chars: int) -> str:
    """About `chars` characters of one speaker's lines (its own Markov chain over WORDS)."""
    successors = rng.integers(0, len(WORDS), (len(WORDS), 3))
    text, word = "", int(rng.integers(len(WORDS)))
    while len(text) < chars:
        line = []
        for _ in range(int(rng.integers(4, 10))):
            line.append(WORDS[word])
            word = int(successors[word, rng.integers(3)])
        text += " ".join(line).capitalize() + str(rng.choice([".", "!", "?"])) + " "
    return text


def leaf_text(users: int = 8, length: int = 80, seed: int = 0) -> tuple[dict, dict]:
    """(train, test) LEAF objects of `users` speakers."""
    rng = np.random.default_rng(seed)
    train = {"users": [], "num_samples": [], "user_data": {}}
    test = {"users": [], "num_samples": [], "user_data": {}}
    for u in range(users):
        name = f"SPEAKER_{u:02d}"
        text = speaker_text(rng, int(rng.integers(300, 901)) + length)
        xs = [text[i:i + length] for i in range(len(text) - length)]
        ys = [text[i + length] for i in range(len(text) - length)]
        cut = len(xs) - len(xs) // 5
        for part, (lo, hi) in ((train, (0, cut)), (test, (cut, len(xs)))):
            part["users"].append(name)
            part["num_samples"].append(hi - lo)
            part["user_data"][name] = {"x": xs[lo:hi], "y": ys[lo:hi]}
    return train, test


def write(out: Path, users: int = 8, length: int = 80, seed: int = 0) -> Path:
    """OUT/train/data.json and OUT/test/data.json; returns OUT."""
    for part, data in zip(("train", "test"), leaf_text(users, length, seed)):
        (out / part).mkdir(parents=True, exist_ok=True)
        (out / part / "data.json").write_text(json.dumps(data))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--length", type=int, default=80)
    parser.add_argument("--seed", type=int, default=0)
    a = parser.parse_args()
    print(write(a.out, a.users, a.length, a.seed))


if __name__ == "__main__":
    main()
