"""Device binding: node-local rank modulo the visible GPUs, the CPU when there are none."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

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
    """Fix intra-op threads and ask for deterministic kernels, so a seed gives the same numbers on any layout.

    TF32 is off: it rounds every convolution's and matmul's inputs to 10 mantissa bits, so the last-ulp
    differences between two float32 kernels (peers stacked into one grouped convolution, or each alone) grow
    to 1e-3 relative at each step, and Dec-SSL's training amplifies that within a round (seen on an H200:
    per-step losses of the batched and the looped peers 4% apart after 5 steps)."""
    torch.set_num_threads(threads)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False


#: The torch.backends flags configure_determinism sets (module, attribute).
_FLAGS = ((torch.backends.cudnn, "benchmark"), (torch.backends.cudnn, "deterministic"),
          (torch.backends.cudnn, "allow_tf32"), (torch.backends.cuda.matmul, "allow_tf32"))


@contextmanager
def kept_torch_settings() -> Iterator[None]:
    """Put back what configure_determinism changes (intra-op threads, the cuDNN and TF32 flags) when the block
    ends: a run inside a caller's process (p2pfl.simulate) leaves it as it was."""
    threads, flags = torch.get_num_threads(), [getattr(module, name) for module, name in _FLAGS]
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        for (module, name), value in zip(_FLAGS, flags):
            setattr(module, name, value)
