"""A network model of one's own for the simulated clock, as a plug-in: peers in data centres.

    python -m p2pfl.run --plugin examples/plugins/network_model.py --network-model data-centres \
        --dc-centres 2 --dc-near 0.001 --dc-far 0.05 --compute-time 0.01 ...

The K peers sit in C data centres of contiguous blocks (peer i in centre ⌊i·C/K⌋): a message between two peers
of one centre takes --dc-near seconds of latency, one between centres --dc-far. Step times and capacities are
the clock's defaults (--compute-time, --upload-rate, ...), which `ClockModel` gives; a model overrides only what
it changes. A network model is a `ClockModel` registered with ``@NETWORK_MODELS.register``; its options are its
`Options` (flags, YAML keys, `--help`), checked by its `check`; `describe` adds to the manifest's `clock` entry.
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
                              section="time")
        dc_near: float = opt(0.001, "data-centres: seconds of latency inside a centre", section="time")
        dc_far: float = opt(0.05, "data-centres: seconds of latency between centres", section="time")

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        check(cfg.dc_centres >= 1, "dc_centres", f"must be >= 1, got {cfg.dc_centres}")
        check(cfg.peers is None or cfg.dc_centres <= cfg.peers, "dc_centres",
              f"{cfg.dc_centres} centres for {cfg.peers} peers: at most one centre a peer")
        for name in ("dc_near", "dc_far"):
            value = getattr(cfg, name)
            check(value >= 0, name, f"must be >= 0 seconds, got {value}")

    def centres(self) -> np.ndarray:
        """Each peer's data centre."""
        return np.arange(self.n) * self.own.dc_centres // self.n

    def latency(self) -> np.ndarray:
        centre = self.centres()
        same = centre[:, None] == centre[None, :]
        return np.where(same, self.own.dc_near, self.own.dc_far).astype(float)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "data_centre": self.centres().tolist()}
