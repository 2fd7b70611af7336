"""The methods a run can use; each lives in its own module and is built on `p2pfl.rounds.Algorithm`."""
from __future__ import annotations

import importlib

_REGISTRY = {
    "dec-ssl": "p2pfl.algorithms.dec_ssl:DecSSL",
    "dec-simsiam": "p2pfl.algorithms.dec_simsiam:DecSimSiam",
    "dec-byol": "p2pfl.algorithms.dec_byol:DecBYOL",
    "dec-featarc": "p2pfl.algorithms.dec_featarc:DecFeatARC",
    "dec-mae": "p2pfl.algorithms.dec_mae:DecMAE",
    "dec-sl": "p2pfl.algorithms.supervised:DecSL",
    "local": "p2pfl.algorithms.supervised:Local",
    "fedmuscle": "p2pfl.algorithms.fedmuscle:FedMuscle",
    "consensus": "p2pfl.algorithms.consensus:Consensus",
    "moon": "p2pfl.algorithms.moon:Moon",
    "fedavg": "p2pfl.algorithms.fedavg:FedAvg",
    "fedprox": "p2pfl.algorithms.fedavg:FedProx",
    "scaffold": "p2pfl.algorithms.fedavg:Scaffold",
    "solo": "p2pfl.algorithms.fedavg:Solo",
}


#: What a name runs when the peers are heterogeneous (--peers-spec), where that differs.
_WITH_PEERS_SPEC = {
    "local": "p2pfl.algorithms.fedmuscle:FedMuscleLocal",  # the spec's peers trained alone: FedMuscle's baseline
}


def names() -> list[str]:
    return list(_REGISTRY)


def batchable() -> list[str]:
    """The methods whose co-located peers can train as one computation (--batch-peers)."""
    return [n for n in _REGISTRY if getattr(get(n), "batchable", False)]


def get(name: str, peers_spec: bool = False) -> type:
    """The Algorithm class registered under `name` (its heterogeneous-peers variant with `peers_spec`)."""
    target = _WITH_PEERS_SPEC.get(name, _REGISTRY[name]) if peers_spec else _REGISTRY[name]
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)
