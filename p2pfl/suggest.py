""""Did you mean ...?" for a name the user got wrong: an option (a flag, a YAML or study key, a simulate keyword),
a component's name, or a data file given without its format's prefix. One place for every site that refuses a
name, so each suggests the same way: a synonym the literature uses first (``--learning-rate``: --lr, which difflib
does not find close), else the closest known spelling by difflib.
"""
from __future__ import annotations

import difflib
import os
from collections.abc import Iterable

#: Option names other papers and simulators use, by the option they mean here (only where the meaning is one).
SYNONYMS = {
    "learning_rate": "lr",
    "epochs": "local_epochs", "num_epochs": "local_epochs", "local_epoch": "local_epochs",
    "nodes": "peers", "num_nodes": "peers", "n_nodes": "peers", "clients": "peers", "num_clients": "peers",
    "n_clients": "peers", "workers": "peers", "num_workers": "peers", "agents": "peers", "num_peers": "peers",
    "n_peers": "peers",
    "graph": "topology", "num_rounds": "rounds", "n_rounds": "rounds", "communication_rounds": "rounds",
    "method": "algorithm", "algo": "algorithm", "bs": "batch_size", "wd": "weight_decay",
    "random_seed": "seed",
}

#: How close (difflib's ratio) a spelling must be to be suggested.
CUTOFF = 0.6


def _key(word: str) -> str:
    """A spelling compared: no leading dashes, lower case, underscores for dashes (--Local-Epochs: local_epochs)."""
    return word.strip().lstrip("-").lower().replace("-", "_")


def closest(word: str, known: Iterable[str], synonyms: bool = False) -> str | None:
    """The spelling in `known` that `word` most likely meant (as `known` spells it), or None: with `synonyms`, an
    option of SYNONYMS first; else the closest by difflib (dashes, underscores and case aside)."""
    by_key = {_key(k): k for k in known}
    key = _key(word)
    if synonyms and SYNONYMS.get(key) in by_key:
        return by_key[SYNONYMS[key]]
    found = difflib.get_close_matches(key, [k for k in by_key if k != key], n=1, cutoff=CUTOFF)
    return by_key[found[0]] if found else None


def hint(word: str, known: Iterable[str], synonyms: bool = False) -> str:
    """"; did you mean X?" for `closest`, or "" when nothing is close: appended to a refusal's first clause."""
    found = closest(word, known, synonyms)
    return f"; did you mean {found}?" if found is not None else ""


def option_hint(word: str, known: Iterable[str]) -> str:
    """`hint` for an option's name (a flag, a key, a keyword), synonyms included."""
    return hint(word, known, synonyms=True)


def value_hint(value: str, allowed: Iterable[str]) -> str:
    """`hint` for a closed option's value: a data file given without its format (``digits.npz`` when the file
    exists and ``npz:PATH`` is allowed: "npz:digits.npz"), a name that takes an argument given without one
    (``npz``: "npz:PATH"), else the closest allowed spelling (the allowed values' own `spellings` when they have
    them: topology aliases)."""
    allowed = list(getattr(allowed, "spellings", allowed))
    found = path_prefixed(value, allowed) or next(
        (entry for entry in allowed if ":" in entry and _key(entry.split(":", 1)[0]) == _key(value)), None)
    return f"; did you mean {found}?" if found is not None else hint(value, allowed)


def path_prefixed(value: str, allowed: Iterable[str]) -> str | None:
    """``NAME:value`` for an existing file `value` whose suffix is a NAME allowed as ``NAME:ARGUMENT`` (``x.csv``
    and ``csv:PATH``), else None."""
    if ":" in value or not os.path.isfile(os.path.expanduser(value)):
        return None
    suffix = os.path.splitext(value)[1].lstrip(".").lower()
    formats = {entry.split(":", 1)[0] for entry in allowed if ":" in entry}
    return f"{suffix}:{value}" if suffix in formats else None
