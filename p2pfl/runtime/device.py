"""Device binding: node-local rank modulo the visible GPUs, the CPU when there are none."""
from __future__ import annotations

import torch

from p2pfl.config import ConfigError

#: The values --device accepts.
DEVICES = ("auto", "cpu", "cuda")


def select_device(requested: str, local_rank: int) -> torch.device:
    """The device this rank's peers live on."""
    count = torch.cuda.device_count() if requested in ("auto", "cuda") else 0
    if requested == "cuda" and count == 0:
        raise ConfigError("--device: cuda requested but no GPU is visible (CUDA_VISIBLE_DEVICES, drivers)")
    if count == 0:
        return torch.device("cpu")
    return torch.device("cuda", local_rank % count)


def configure_determinism(threads: int, device: torch.device) -> None:
    """Fix intra-op threads and ask for deterministic kernels, so a seed gives the same numbers on any layout."""
    torch.set_num_threads(threads)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
