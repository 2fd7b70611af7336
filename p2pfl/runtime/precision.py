"""The run's floating precision (--dtype): torch's default dtype for the run's duration.

Models, optimiser states, augmented batches, gossip vectors and probes are built in the default dtype, so one
switch moves all of them; float64 keeps the differences between two CPUs' kernels near float64 rounding, which a
tight tolerance can tell from a real change of computation (float32 SimCLR amplifies last-bit differences)."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

#: The values --dtype accepts.
DTYPES = {"float32": torch.float32, "float64": torch.float64}


@contextmanager
def precision(name: str) -> Iterator[torch.dtype]:
    """Make `name` (float32, float64) torch's default dtype inside the block; the previous one after it."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(DTYPES[name])
    try:
        yield DTYPES[name]
    finally:
        torch.set_default_dtype(previous)

