"""Refactoring guard: a short run of every method, every option explicit, reproduces its recorded
metrics.jsonl (timings aside): bit for bit on the machine and libraries the goldens were recorded with
(tests/golden/FINGERPRINT.json), within golden_cases.RTOL elsewhere, every key, integer and string exact.
Re-record only for a deliberate change of behaviour."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from golden_cases import ATOL, CASES, GOLDEN, RTOL, differences, fingerprint, recorded_fingerprint, run_case

#: Two computation paths compared to a tolerance: rerun under other CPU kernels (scripts/test.sh).
#: Another machine's kernels (ATEN_CPU_CAPABILITY=default: no AVX2/AVX-512) are that rerun's: a golden then
#: holds within RTOL (the fingerprint names the capability).
pytestmark = pytest.mark.numerics


def _expected(case: str) -> list[dict]:
    return [json.loads(line) for line in (GOLDEN / f"{case}.jsonl").read_text().splitlines()]


def _tolerance() -> tuple[float, float]:
    """Exact on the recording's machine and libraries, RTOL/ATOL elsewhere."""
    return (0.0, 0.0) if fingerprint() == recorded_fingerprint() else (RTOL, ATOL)


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_run(tmp_path: Path, case: str) -> None:
    got = json.loads(json.dumps(run_case(case, tmp_path)))
    problems = differences(_expected(case), got, *_tolerance())
    assert not problems, f"{case} differs from its golden:\n" + "\n".join(problems[:20])


def test_tolerance_catches_a_small_change(tmp_path: Path) -> None:
    """RTOL is tight: a learning rate 1e-6 relative off the golden's changes the records beyond it."""
    got = json.loads(json.dumps(run_case("dec-ssl", tmp_path, lr=1e-3 * (1 + 1e-6))))
    problems = differences(_expected("dec-ssl"), got, RTOL, ATOL)
    assert any("consensus_distance" in line for line in problems), problems


def test_differences_compares_structure_exactly() -> None:
    want = {"a": 1, "b": [1.0, "x"], "c": {"d": 2.0}}
    assert differences(want, {"a": 1, "b": [1.0 + 1e-12, "x"], "c": {"d": 2.0}}, 1e-9) == []
    assert differences(want, {"a": 1, "b": [1.0 + 1e-12, "x"], "c": {"d": 2.0}}) != []  # exact: any bit
    assert differences(want, {"a": 1.0, "b": [1.0, "x"], "c": {"d": 2.0}}, 1e-9) != []  # int vs float
    assert differences(want, {"a": 1, "b": [1.0, "y"], "c": {"d": 2.0}}, 1e-9) != []
    assert differences(want, {"a": 1, "b": [1.0], "c": {"d": 2.0}}, 1e-9) != []
    assert differences(want, {"a": 1, "b": [1.0, "x"], "c": {"e": 2.0}}, 1e-9) != []
    assert differences({"x": 0.0}, {"x": 1e-13}, 1e-9, 1e-12) == []
    assert differences({"x": 0.0}, {"x": 1e-11}, 1e-9, 1e-12) != []
    assert differences({"x": float("nan")}, {"x": float("nan")}) == []
