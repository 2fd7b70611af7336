"""The process world: its collectives in one process need no MPI and no special case; under mpirun they
and the reductions gossip uses give exactly what a brute force over the ranks' inputs gives."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from p2pfl.comm import World

from conftest import run_job

ALONE = World(comm=None, rank=0, size=1, local_rank=0, local_size=1, host="here")  # no communicator at all


@pytest.mark.parametrize("make", [lambda: ALONE, World.detect], ids=["no-comm", "detected"])
def test_one_process_collectives_are_local(make: Callable[[], World]) -> None:
    world = make()
    record = {"peers": [0, 1], "loss": 0.5}
    assert world.size == 1 and world.is_root
    assert world.gather(record) == [record] and world.gather(record)[0] is record
    assert world.allgather(record)[0] is record and len(world.allgather(record)) == 1
    assert world.bcast(record) is record
    assert world.barrier() is None
    assert world.allreduce_max(-2.5) == -2.5
    ints = np.array([2 ** 62 + 1, -3], dtype=np.int64)
    assert world.allreduce_sum_(ints) is ints and ints.tolist() == [2 ** 62 + 1, -3]
    assert world.neighbour_comm([]) is None


# per rank: what it contributes. The int64 values lose their low bits in float64, so only an integer sum
# is exact; the largest of `max` sits on rank 1 in the first slot and on rank 0 in the second.
INPUTS = [
    {"max": [-3.5, 2.0, float("-inf")], "ints": [2 ** 60 + 1, -(2 ** 62), 7], "floats": [0.1, -2.5, 1e300]},
    {"max": [1.25, -7.0, -1e-300], "ints": [2 ** 61 + 3, 2 ** 62 - 1, -8], "floats": [0.2, 2.5, -1e300]},
]


@pytest.mark.mpi
def test_collectives_and_reductions_on_two_ranks(tmp_path: Path) -> None:
    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps(INPUTS))
    proc = run_job(["tests/mpi/world_check.py", str(inputs), str(tmp_path / "out")], ranks=len(INPUTS))
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = range(len(INPUTS))
    maxima = [max(row["max"][i] for row in INPUTS) for i in range(3)]
    int_sums = [sum(row["ints"][i] for row in INPUTS) for i in range(3)]
    float_sums = [INPUTS[0]["floats"][i] + INPUTS[1]["floats"][i] for i in range(3)]  # two terms: any order
    for rank in ranks:
        got = json.loads((tmp_path / f"out.{rank}.json").read_text())
        want_gather = [{"rank": r, "ints": INPUTS[r]["ints"]} for r in ranks] if rank == 0 else None
        assert got["gather"] == want_gather, rank
        assert got["allgather"] == [10 * r for r in ranks]
        assert got["bcast"] == [f"from rank {r}" for r in ranks]
        assert got["max"] == maxima
        assert got["ints"] == int_sums and got["in_place"]
        assert got["floats"] == float_sums
        assert got["neighbours"] == [[1 - rank], [1 - rank]]


def test_poll_until_sleeps_with_doubling_pauses_up_to_the_cap(monkeypatch) -> None:
    """A waiting rank on an oversubscribed node sleeps between polls: pauses double from POLL_FIRST_S and stop
    growing at POLL_MAX_S, and it returns at the first poll that succeeds."""
    from p2pfl.comm import world as world_module
    pauses: list[float] = []
    monkeypatch.setattr(world_module.time, "sleep", pauses.append)
    polls = iter([False] * 12 + [True])
    world_module.poll_until(lambda: next(polls))
    first, cap = world_module.POLL_FIRST_S, world_module.POLL_MAX_S
    expected = [min(first * 2 ** i, cap) for i in range(12)]
    assert pauses == expected and pauses[-1] == cap and next(polls, "spent") == "spent"


@pytest.mark.parametrize("forced, cores, ranks, expected", [
    (None, 2, 2, False), (None, 2, 3, True), (None, 16, 4, False), (None, None, 2, True),  # no count: one core
    ("1", 16, 1, True), ("0", 2, 8, False), ("yes", 2, 3, True),  # other values than 0 and 1: counted
])
def test_oversubscribed_compares_the_node_s_ranks_with_its_cores_unless_told(
        forced: str | None, cores: int | None, ranks: int, expected: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from p2pfl.comm import world

    if forced is None:
        monkeypatch.delenv("P2PFL_OVERSUBSCRIBED", raising=False)
    else:
        monkeypatch.setenv("P2PFL_OVERSUBSCRIBED", forced)
    monkeypatch.setattr(world.os, "cpu_count", lambda: cores)
    assert world._oversubscribed(ranks) is expected
