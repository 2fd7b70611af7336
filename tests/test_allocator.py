"""Host allocator tuning: freed activation memory is reused instead of page-faulted in again."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

WORKLOAD = r"""
import resource, sys, torch
from p2pfl.runtime.allocator import keep_freed_memory
print(keep_freed_memory())
x = torch.randn(64, 16, 28, 28)
w = torch.randn(96, 1, 5, 5)
def step():
    y = torch.nn.functional.conv2d(x, w, groups=16).relu_()
    return float(torch.nn.functional.max_pool2d(y, 2).sum())
step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10)
"""


#: glibc's initial mmap threshold (128 KiB), fixed: glibc otherwise raises it after the first free of an mmapped
#: block, sometimes within the workload's first step, so whether the untuned baseline refaults would be chance.
GLIBC_INITIAL = {"MALLOC_MMAP_THRESHOLD_": str(128 << 10)}


def faults(tuning: str) -> tuple[str, float]:
    env = {**os.environ, "P2PFL_MALLOC_TUNING": tuning, "OMP_NUM_THREADS": "1", **GLIBC_INITIAL}
    out = subprocess.run([sys.executable, "-c", WORKLOAD], env=env, capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    what, per_step = out.stdout.strip().splitlines()[-2:]
    return what, float(per_step)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_tuned_malloc_stops_refaulting_a_steps_activations():
    """A step's activations (a 14 MB convolution output, its pooled copy) are page-faulted in anew every step by
    glibc at its initial threshold (it unmaps blocks that large on free: ~3,400 faults per 14 MB), and reused once
    tuned (the tuning's mallopt overrides the threshold the environment set)."""
    what_off, off = faults("0")
    what_on, on = faults("1")
    assert what_off.startswith("off") and what_on.startswith("glibc mallopt")
    pages = 64 * 96 * 24 * 24 * 4 / 4096  # the convolution output alone
    assert off > pages, (off, pages)
    assert on < off / 4, (on, off)
