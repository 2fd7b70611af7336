"""The methods a run can use; each lives in its own module and is built on `p2pfl.rounds.Algorithm`."""
from __future__ import annotations

import importlib

_REGISTRY = {
    "dec-ssl": "p2pfl.algorithms.dec_ssl:DecSSL",
    "dec-sl": "p2pfl.algorithms.supervised:DecSL",
    "local": "p2pfl.algorithms.fedmuscle:Local",  # supervised Local, or FedMuscleLocal with --peers-spec
    "fedmuscle": "p2pfl.algorithms.fedmuscle:FedMuscle",
    "consensus": "p2pfl.algorithms.consensus:Consensus",
    "moon": "p2pfl.algorithms.moon:Moon",
    "fedavg": "p2pfl.algorithms.fedavg:FedAvg",
    "fedprox": "p2pfl.algorithms.fedavg:FedProx",
    "scaffold": "p2pfl.algorithms.fedavg:Scaffold",
    "solo": "p2pfl.algorithms.fedavg:Solo",
}


def names() -> list[str]:
    return list(_REGISTRY)


def get(name: str) -> type:
    """The Algorithm class registered under `name`."""
    module, _, cls = _REGISTRY[name].partition(":")
    return getattr(importlib.import_module(module), cls)
