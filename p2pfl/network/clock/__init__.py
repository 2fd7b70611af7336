"""The network models of the simulated clock (SPEC §9): a registry of classes, one file each, chosen by
--network-model. A model tells the clock each peer's seconds per local step, each link's latency and each peer's
upload and download capacities; `build` turns the chosen one into the arrays the clock times rounds with
(p2pfl.network.timing.NetworkModel), from the clock's own options (`ClockOptions`), the same on every rank.

Adding one is a file here (or a plug-in) with a `ClockModel` subclass and its ``@NETWORK_MODELS.register`` line.
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from p2pfl.options import method_options, opt, owned
from p2pfl.registry import Registry, options_of

if TYPE_CHECKING:
    from p2pfl.network.timing import NetworkModel

NETWORK_MODELS: Registry[Any] = Registry("network model", option="network_model", package="p2pfl.network.clock")


@method_options("clock")
class Selection:
    """The option that picks the clock's network model (its own options follow in its section)."""

    network_model: str = opt("links", "the simulated clock's network model: what a step, a link's latency and a "
                                      "peer's capacity cost", owned("p2pfl.network.clock", "NETWORK_MODELS"),
                             section="time")


@dataclass(frozen=True)
class ClockOptions:
    """What the clock is built from: the seed, the step-time options every model may read, the chosen model's
    name and its own options (an instance of its `Options`, None when it declares none: the links model's hold
    --latency, --latency-matrix, --upload-rate and --download-rate)."""

    seed: int
    compute_time: float
    compute_spread: float
    compute_trace: str | None
    straggler_slowdown: float
    network_model: str
    model: Any = None

    @classmethod
    def of(cls, options: Any) -> ClockOptions:
        """These options read off an object that has them as attributes (a resolved RunConfig), the chosen
        model's own options too."""
        values = {f.name: getattr(options, f.name) for f in fields(cls) if f.name != "model"}
        return cls(**values, model=options_of(NETWORK_MODELS.get(values["network_model"]), options))


def build(options: ClockOptions, n_peers: int, slow: Collection[int] = ()) -> NetworkModel:
    """The clock's network of `n_peers` peers under the chosen model; `slow`: the --stragglers peers, whose step
    time --straggler-slowdown multiplies. ValueError naming the option on bad input (a file, a shape)."""
    from p2pfl.network.timing import NetworkModel  # here: reading the registry's names imports no torch

    model = NETWORK_MODELS.get(options.network_model)(options, n_peers)
    compute = np.array(model.step_times(), dtype=float)
    for p in slow:
        compute[p] *= options.straggler_slowdown
    return NetworkModel(compute, np.asarray(model.latency(), dtype=float), np.asarray(model.upload(), dtype=float),
                        np.asarray(model.download(), dtype=float), about=model.describe())


__all__ = ["NETWORK_MODELS", "ClockOptions", "build"]
