"""No hang: a failing rank ends the job within seconds; a silent neighbour triggers the timeout message."""
from __future__ import annotations

import re
import time

import pytest

from conftest import run_job

pytestmark = pytest.mark.mpi
BASE = ["-m", "p2pfl.run", "--algorithm", "consensus", "--topology", "cycle", "--peers", "4", "--rounds", "50",
        "--vector-size", "1000", "--no-progress", "--no-plots"]


def test_rank_that_raises_ends_the_job(runs_dir) -> None:
    start = time.monotonic()
    proc = run_job([*BASE, "--out", str(runs_dir), "--fault", "raise@2:3"], ranks=4, timeout=120)
    elapsed = time.monotonic() - start
    assert proc.returncode != 0
    assert "p2pfl: rank 2 on" in proc.stderr and "failed" in proc.stderr
    assert "injected fault on rank 2 in round 3" in proc.stderr
    assert proc.stderr.count("Traceback (most recent call last)") == 1
    assert elapsed < 100  # the start-up of 4 Python processes dominates; the abort itself is immediate


def test_silent_neighbour_triggers_timeout(runs_dir) -> None:
    proc = run_job([*BASE, "--out", str(runs_dir), "--fault", "silent@1:2", "--timeout", "3"], ranks=4,
                   timeout=120)
    assert proc.returncode == 3  # the timeout's exit status, distinct from a failure's 1 and bad input's 2
    # peers 0 and 2 wait for silent peer 1; whichever watchdog fires first names itself on one line
    line = r"^p2pfl: timeout: peer ([02]) \(rank \1\) waited 3 s in round 2 for neighbour 1 \(rank 1\)$"
    assert re.search(line, proc.stderr, re.MULTILINE), proc.stderr[-3000:]
