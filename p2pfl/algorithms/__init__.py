"""The methods a run can use; each lives in its own module and is built on `p2pfl.method.Algorithm`.

The built-ins are named here by where they live (imported when first asked for); a plug-in registers its own
class with `@register_method("name")`.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, TypeVar

A = TypeVar("A", bound=type)

_REGISTRY: dict[str, str | type] = {
    "dec-ssl": "p2pfl.algorithms.dec_ssl:DecSSL",
    "dec-simsiam": "p2pfl.algorithms.dec_simsiam:DecSimSiam",
    "dec-byol": "p2pfl.algorithms.dec_byol:DecBYOL",
    "dec-featarc": "p2pfl.algorithms.dec_featarc:DecFeatARC",
    "dec-mae": "p2pfl.algorithms.dec_mae:DecMAE",
    "dec-sl": "p2pfl.algorithms.supervised:DecSL",
    "local": "p2pfl.algorithms.supervised:Local",
    "fedmuscle": "p2pfl.fedmuscle.algorithm:FedMuscle",
    "consensus": "p2pfl.algorithms.consensus:Consensus",
    "quadratic": "p2pfl.algorithms.quadratic:Quadratic",
    "moon": "p2pfl.algorithms.moon:Moon",
    "fedavg": "p2pfl.algorithms.fedavg:FedAvg",
    "fedprox": "p2pfl.algorithms.fedavg:FedProx",
    "scaffold": "p2pfl.algorithms.fedavg:Scaffold",
    "solo": "p2pfl.algorithms.fedavg:Solo",
}


def register_method(name: str) -> Callable[[A], A]:
    """Class decorator: register an Algorithm subclass as the method `name` (a name already taken is an error,
    unless it is the same class registered again)."""
    def register(cls: A) -> A:
        known = _REGISTRY.get(name)
        if known is not None and (known if isinstance(known, str) else f"{known.__module__}:{known.__qualname__}") \
                != f"{cls.__module__}:{cls.__qualname__}":
            raise ValueError(f"method {name!r} is already registered")
        _REGISTRY[name] = cls
        cls.name = name
        return cls
    return register


def names() -> list[str]:
    return list(_REGISTRY)


def batchable() -> list[str]:
    """The methods whose co-located peers can train as one computation (--batch-peers)."""
    from p2pfl.capabilities import BATCHABLE

    return [n for n in _REGISTRY if get(n).can(BATCHABLE)]


def get(name: str, cfg: Any = None) -> type:
    """The Algorithm class registered under `name`; given a run's configuration (a RunConfig), the class that runs
    it (the registered class's `runs(cfg)`: itself unless an option hands the run to another)."""
    entry = _REGISTRY[name]
    if isinstance(entry, str):
        module, _, cls = entry.partition(":")
        entry = getattr(importlib.import_module(module), cls)
    algorithm = entry
    return algorithm if cfg is None else algorithm.runs(cfg)
