"""The methods a run can use; each lives in its own module and is built on `p2pfl.rounds.Algorithm`."""
from __future__ import annotations

import importlib

_REGISTRY = {
    "consensus": "p2pfl.algorithms.consensus:Consensus",
}


def names() -> list[str]:
    return list(_REGISTRY)


def get(name: str) -> type:
    """The Algorithm class registered under `name`."""
    module, _, cls = _REGISTRY[name].partition(":")
    return getattr(importlib.import_module(module), cls)
