"""The default network model: one latency for every link (--latency) or a K × K file of them
(--latency-matrix), and every peer's upload and download capacity (--upload-rate, --download-rate)."""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from p2pfl.network.clock import NETWORK_MODELS
from p2pfl.network.clock.base import ClockModel
from p2pfl.network.timing import latencies
from p2pfl.options import Check


@NETWORK_MODELS.register("links")
class Links(ClockModel):
    """Per-link latency from --latency or --latency-matrix; capacities from --upload-rate and --download-rate."""

    def latency(self) -> np.ndarray:
        return latencies(self.n, self.options.latency, self.options.latency_matrix)

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        check(cfg.latency_matrix is None or os.path.isfile(cfg.latency_matrix), "latency_matrix",
              f"file not found: {cfg.latency_matrix}")
