"""A network model of one's own for the simulated clock, as a plug-in: peers in data centres.

    python -m p2pfl.run --plugin examples/plugins/network_model.py --network-model data-centres \
        --dc-centres 2 --dc-near 0.001 --dc-far 0.05 ...

The K peers sit in C data centres of contiguous blocks (peer i in centre ⌊i·C/K⌋): a message between two peers
of one centre takes --dc-near seconds of latency, one between centres --dc-far. Step times and capacities are
the clock's defaults (--compute-time with its spread or trace; unlimited capacities), which `ClockModel` gives; a
model overrides only what it changes. A network model is a `ClockModel` registered with
``@NETWORK_MODELS.register``; its options are its `Options` (flags, YAML keys, `--help`, ranges as `bounds`), its
rules on other options its `check` (after `super().check`) and, where the peer count matters, `check_resolved`.
Choosing it turns the simulated clock on (`keeps_clock`), no --compute-time needed; `describe` adds to the
manifest's `clock` entry.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from p2pfl.network.clock import NETWORK_MODELS
from p2pfl.network.clock.base import ClockModel
from p2pfl.options import Check, opt


@NETWORK_MODELS.register("data-centres")
class DataCentres(ClockModel):
    """Fast links inside a data centre, slow ones between centres."""

    class Options:
        dc_centres: int = opt(2, "data-centres: how many data centres hold the peers (contiguous blocks)",
                              section="time", bounds=">= 1")
        dc_near: float = opt(0.001, "data-centres: seconds of latency inside a centre", section="time",
                             bounds=">= 0 seconds")
        dc_far: float = opt(0.05, "data-centres: seconds of latency between centres", section="time",
                            bounds=">= 0 seconds")

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        super().check(cfg, check)  # the step-time options' rules, which every model shares

    @classmethod
    def check_resolved(cls, cfg: Any, check: Check) -> None:
        """Once the peer count is known (`cfg.peers` a number, also when --peers is left to the world size)."""
        check(cfg.dc_centres <= cfg.peers, "dc_centres",
              f"{cfg.dc_centres} centres for {cfg.peers} peers: at most one centre a peer")

    def centres(self) -> np.ndarray:
        """Each peer's data centre."""
        return np.arange(self.n) * self.own.dc_centres // self.n

    def latency(self) -> np.ndarray:
        centre = self.centres()
        same = centre[:, None] == centre[None, :]
        return np.where(same, self.own.dc_near, self.own.dc_far).astype(float)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "data_centre": self.centres().tolist()}
