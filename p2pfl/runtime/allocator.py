"""Host memory: keep freed activation memory in the process instead of handing it back to the kernel.

PyTorch's CPU tensors come from glibc's malloc. By default glibc serves a large block (above a threshold that
adapts up to 32 MiB) with its own mmap and unmaps it on free, and trims the heap's free top back to the kernel;
a training step that allocates and frees the same activations every step then page-faults on all of them again
(measured on the 2-core machine: a grouped convolution + ReLU + pooling of 16 peers' batch took 6,820 minor page
faults and 55 ms a step untuned, 484 and 37 ms tuned; the batched Dec-SSL round of 20 simple-CNN peers went from
390 to 317 ms). `keep_freed_memory` raises both thresholds once per process (mallopt), so blocks up to 32 MiB are
reused from the heap. The cost is resident memory that stays with the process after a peak, which the manifest's
peak figure already counts. Elsewhere than glibc it does nothing; P2PFL_MALLOC_TUNING=0 turns it off.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

#: mallopt parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: Blocks below this come from the heap (32 MiB: glibc's upper limit for the threshold on 64-bit systems).
MMAP_THRESHOLD = 32 << 20
#: Free memory at the heap's top kept before trimming it back to the kernel.
TRIM_THRESHOLD = 1 << 30

_applied: str | None = None


def keep_freed_memory() -> str:
    """Tune glibc's malloc for the process (idempotent); returns what was done, for the manifest."""
    global _applied
    if _applied is not None:
        return _applied
    if os.environ.get("P2PFL_MALLOC_TUNING", "1") == "0":
        _applied = "off (P2PFL_MALLOC_TUNING=0)"
    elif not sys.platform.startswith("linux"):
        _applied = f"untouched ({sys.platform})"
    else:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            mallopt = libc.mallopt
        except (OSError, AttributeError):
            _applied = "untouched (no glibc mallopt)"
        else:
            mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
            ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
            _applied = (f"glibc mallopt: mmap threshold {MMAP_THRESHOLD >> 20} MiB, trim threshold "
                        f"{TRIM_THRESHOLD >> 20} MiB" if ok else "untouched (mallopt refused)")
    return _applied
