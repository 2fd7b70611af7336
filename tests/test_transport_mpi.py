"""The transport under mpirun -n 1/2/4: payloads whose size and dtype differ per link and per call, calls in
flight together, any number of calls a round, and a non-blocking call overlapped with computation equal to the
blocking one, and receive buffers reused only once released (tests/mpi/transport_check.py)."""
from __future__ import annotations

import json

import pytest

from conftest import run_job

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("ranks, pack", [(1, None), (2, None), (4, None), (2, 100), (4, 0)])
def test_transport_properties(ranks: int, pack: int | None, tmp_path) -> None:
    """With the default pack size every payload travels packed; 100 bytes packs some and sends the others alone,
    0 sends each alone."""
    out = tmp_path / "transport.json"
    extra = [] if pack is None else [str(pack)]
    proc = run_job(["tests/mpi/transport_check.py", str(out), *extra], ranks=ranks, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result["failures"]) == {"sizes_per_link_and_round", "two_calls_in_flight", "many_calls_a_round",
                                       "overlapped_equals_blocking", "released_buffers_reused"}
    assert result["failures"] == dict.fromkeys(result["failures"]), result["failures"]
    assert result["calls"] == [30] * ranks  # every rank counted the same calls (their tags' sequence numbers)
