"""Compressed gossip does not depend on where the peers sit: --gossip average with every --compress codec (and
--gossip choco with each), on consensus and on the quadratic problem, gives the same records bit for bit on 1, 2
and 4 ranks (8 peers on a cycle, float64, 5 rounds; tests/mpi/compress_runs.py runs them all in one job).

The records hold every round's consensus distance (and the quadratic problem's per-peer losses and error), the
per-peer final metrics and the bytes each peer sent, so equal records mean equal messages and equal vectors."""
from __future__ import annotations

import pytest

from conftest import run_job
from golden_cases import normalise

PROBLEMS = ("consensus", "quadratic", "choco")
CODECS = ("none", "top-k", "random-k", "qsgd", "sign")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, list[dict]]]:
    found = {}
    for ranks in (0, 2, 4):  # 0: one plain process
        out = tmp_path_factory.mktemp("compress") / f"r{ranks}"
        proc = run_job(["tests/mpi/compress_runs.py", str(out)], ranks=ranks, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        found[ranks] = {d.name: normalise(d / "metrics.jsonl") for d in sorted(out.iterdir())}
    return found


@pytest.mark.mpi
@pytest.mark.parametrize("problem", PROBLEMS)
@pytest.mark.parametrize("codec", CODECS)
def test_same_records_on_1_2_and_4_ranks(outputs: dict[int, dict[str, list[dict]]], problem: str,
                                         codec: str) -> None:
    name = f"{problem}-{codec}"
    one = outputs[0][name]
    rounds = [r for r in one if r["type"] == "round" and r["round"] > 0]
    assert len(rounds) == 5 and all(r["rejected"] == [] for r in rounds)
    for ranks in (2, 4):
        assert outputs[ranks][name] == one, (name, ranks)  # bitwise, timings aside
        per_peer = [r["bytes_sent_per_peer"] for r in outputs[ranks][name] if r["type"] == "round" and r["round"] > 0]
        assert per_peer == [r["bytes_sent_per_peer"] for r in rounds], (name, ranks)


def test_the_codecs_do_change_the_runs(outputs: dict[int, dict[str, list[dict]]]) -> None:
    """A guard on the comparison above: each codec's messages and trace differ from the dense run's."""
    def last_round(name: str) -> dict:
        return [r for r in outputs[0][name] if r["type"] == "round"][-1]

    for problem in PROBLEMS:
        dense = last_round(f"{problem}-none")
        for codec in CODECS[1:]:
            record = last_round(f"{problem}-{codec}")
            assert record["bytes_sent"] < dense["bytes_sent"], (problem, codec)
            assert record["consensus_distance"] != dense["consensus_distance"], (problem, codec)
