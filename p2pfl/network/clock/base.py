"""What a network model of the simulated clock is: a class the clock asks for per-peer step seconds, per-link
latency and per-peer capacities (SPEC §9)."""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from p2pfl.network.clock import ClockOptions
from p2pfl.network.timing import bandwidths, compute_times
from p2pfl.options import Check
from p2pfl.registry import Component


class ClockModel(Component):
    """A network model: built once per run from the clock's options and the peer count, on every rank alike
    (draw anything random from `p2pfl.seeding.numpy_rng(seed, peer, purpose)`).

    A subclass gives `latency` (K × K seconds, a_ij for a message from i to j); it may replace `step_times` (by
    default --compute-time with --compute-spread, or --compute-trace) and `upload` / `download` (by default
    np.inf: unlimited). Its own options are its `Options` (read as `self.own`), its rules on them its
    `check(cfg, check)` (super().check first: the step-time options' rules), whether choosing it turns the clock on
    `keeps_clock(cfg)`, and `describe` what the manifest's `clock` records."""

    def __init__(self, options: ClockOptions, n_peers: int) -> None:
        self.options = options
        self.n = n_peers
        self.own: Any = options.model

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        """The rules on the step-time options every model reads; a model with rules of its own extends this."""
        check(not cfg.compute_spread or (cfg.compute_time > 0 and cfg.compute_trace is None), "compute_spread",
              "spreads --compute-time (> 0) around its median; not without it, nor with --compute-trace")
        check(cfg.compute_trace is None or os.path.isfile(cfg.compute_trace), "compute_trace",
              f"file not found: {cfg.compute_trace}")

    @classmethod
    def keeps_clock(cls, cfg: Any) -> bool:
        """Whether a run that chose this model keeps the simulated clock without a step time: a researcher who
        picks a network model wants its clock."""
        return True

    def step_times(self) -> np.ndarray:
        """c_i: each peer's seconds per local step (the --stragglers' slowdown is applied after)."""
        o = self.options
        return compute_times(self.n, o.seed, o.compute_time, o.compute_spread, o.compute_trace)

    def latency(self) -> np.ndarray:
        """a_ij: the latency in seconds of a message from peer i to peer j, a K × K array."""
        raise NotImplementedError(f"network model {self.name!r} gives no latency")

    def upload(self) -> np.ndarray:
        """U_i: each peer's upload capacity in bytes per second, shared by its concurrent transfers."""
        return bandwidths(self.n)

    def download(self) -> np.ndarray:
        """D_i: each peer's download capacity in bytes per second, shared likewise."""
        return bandwidths(self.n)

    def describe(self) -> dict[str, Any]:
        """What the manifest's `clock` entry records of the model besides its arrays: its name and own options."""
        own = {} if self.own is None else {k: v for k, v in vars(self.own).items() if not k.startswith("_")}
        return {"network_model": self.name, **({"network_model_options": own} if own else {})}
