"""Refactoring guard: a short run of every method, every option explicit, reproduces its recorded
metrics.jsonl bit for bit (timings aside). Re-record only for a deliberate change of behaviour."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from golden_cases import CASES, GOLDEN, run_case


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_run(tmp_path: Path, case: str) -> None:
    expected = [json.loads(line) for line in (GOLDEN / f"{case}.jsonl").read_text().splitlines()]
    got = json.loads(json.dumps(run_case(case, tmp_path)))
    assert len(got) == len(expected)
    for want, have in zip(expected, got):
        assert have == want, f"{case}: record {want.get('type')} of round {want.get('round')} differs"
