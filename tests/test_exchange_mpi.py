"""The wire under mpirun: gossip equals W·X for every topology on 1, 2 and 4 ranks with more peers than ranks."""
from __future__ import annotations

import json

import pytest

from conftest import run_job

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_gossip_step_equals_central_mix(ranks: int, tmp_path) -> None:
    out = tmp_path / "gossip.json"
    proc = run_job(["tests/mpi/gossip_check.py", str(out)], ranks=ranks)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert len(results) == 10
    for key, res in results.items():
        expected = list(range(7)) if key.endswith("/all") else [0, 2, 3, 5, 6]
        assert res["peers"] == expected, key
        assert res["dev"] < 1e-5, (key, res)
        assert res["exact"], key
