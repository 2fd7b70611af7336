"""The methods a run can use; each lives in its own module and is built on `p2pfl.rounds.Algorithm`."""
from __future__ import annotations

import importlib
from typing import Any

_REGISTRY = {
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


def names() -> list[str]:
    return list(_REGISTRY)


def batchable() -> list[str]:
    """The methods whose co-located peers can train as one computation (--batch-peers)."""
    return [n for n in _REGISTRY if getattr(get(n), "batchable", False)]


def get(name: str, cfg: Any = None) -> type:
    """The Algorithm class registered under `name`; given a run's configuration (a RunConfig), the class that runs
    it (the registered class's `runs(cfg)`: itself unless an option hands the run to another)."""
    module, _, cls = _REGISTRY[name].partition(":")
    algorithm = getattr(importlib.import_module(module), cls)
    return algorithm if cfg is None else algorithm.runs(cfg)
