"""The default network model: one latency for every link (--latency) or a K × K file of them
(--latency-matrix), and every peer's upload and download capacity (--upload-rate, --download-rate). The clock runs
under it only once one of these (or a step time) is set."""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from p2pfl.network.clock import NETWORK_MODELS
from p2pfl.network.clock.base import ClockModel
from p2pfl.network.timing import bandwidths, latencies
from p2pfl.options import Check, opt
from p2pfl.registry import options_of


@NETWORK_MODELS.register("links")
class Links(ClockModel):
    """Per-link latency from --latency or --latency-matrix; capacities from --upload-rate and --download-rate."""

    class Options:
        latency: float = opt(0.0, "simulated seconds of every link's latency", section="time", bounds=">= 0")
        latency_matrix: str | None = opt(None, "K x K file of per-link latencies in seconds (.npy, CSV or text), "
                                               "instead of --latency", section="time")
        upload_rate: float = opt(0.0, "every peer's upload capacity in bytes/s, shared by its concurrent transfers "
                                      "(0: unlimited)", section="time", bounds=">= 0")
        download_rate: float = opt(0.0, "every peer's download capacity in bytes/s, shared likewise (0: unlimited)",
                                   section="time", bounds=">= 0")

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        super().check(cfg, check)
        check(cfg.latency_matrix is None or os.path.isfile(cfg.latency_matrix), "latency_matrix",
              f"file not found: {cfg.latency_matrix}")

    @classmethod
    def keeps_clock(cls, cfg: Any) -> bool:
        return options_of(cls, cfg) != options_of(cls, None)  # any link option set

    def latency(self) -> np.ndarray:
        return latencies(self.n, self.own.latency, self.own.latency_matrix)

    def upload(self) -> np.ndarray:
        return bandwidths(self.n, self.own.upload_rate)

    def download(self) -> np.ndarray:
        return bandwidths(self.n, self.own.download_rate)

    def describe(self) -> dict[str, Any]:
        return {"network_model": self.name}  # its options are in the run's configuration, as before it had them
