"""The wire under mpirun: gossip equals W·X for every topology on 1, 2 and 4 ranks with more peers than ranks,
and every rank counts the bytes that a brute force over the graph's edges says it moved."""
from __future__ import annotations

import json

import pytest

import topologies
from p2pfl.comm import Placement

from conftest import run_job

pytestmark = pytest.mark.mpi
N_PEERS, MESSAGE_BYTES = 7, 4000  # tests/mpi/gossip_check.py: 7 peers, 1000 float32 values each


def expected_counters(topology: str, active: set[int], ranks: int) -> list[dict[str, dict[str, int]]]:
    """Per rank: wire bytes per other rank (one message per sending peer and receiving rank, whatever the
    number of neighbours there) and logical bytes per local peer with active edges (one message per edge)."""
    graph = topologies.build(topology, N_PEERS, seed=3)
    placement = Placement(N_PEERS, ranks)
    edges = [(p, q) for p, q in graph.to_directed().edges if p in active and q in active]
    out = []
    for rank in range(ranks):
        def wire(sender: int, receiver: int, rank: int = rank) -> dict[str, int]:
            """Bytes sender rank -> receiver rank, keyed by the other rank as seen from `rank`."""
            senders = {p for p, q in edges if placement.rank_of(p) == sender and placement.rank_of(q) == receiver}
            return {str(receiver if sender == rank else sender): MESSAGE_BYTES * len(senders)} if senders else {}
        others = [r for r in range(ranks) if r != rank]
        degree = {str(p): MESSAGE_BYTES * n for p in placement.peers_of(rank)
                  if (n := sum(1 for a, _ in edges if a == p))}
        out.append({"wire_sent": {k: v for r in others for k, v in wire(rank, r).items()},
                    "wire_recv": {k: v for r in others for k, v in wire(r, rank).items()},
                    "peer_sent": degree, "peer_recv": degree})
    return out


@pytest.mark.parametrize("ranks, oversubscribed", [(1, "0"), (2, "0"), (4, "0"), (4, "1")])
def test_gossip_step_equals_central_mix(ranks: int, oversubscribed: str, tmp_path) -> None:
    """Also with waits that sleep between polls (an oversubscribed node: p2pfl.comm.world.poll_until)."""
    out = tmp_path / "gossip.json"
    proc = run_job(["tests/mpi/gossip_check.py", str(out)], ranks=ranks,
                   env={"P2PFL_OVERSUBSCRIBED": oversubscribed})
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert len(results) == 10
    for key, res in results.items():
        expected = list(range(7)) if key.endswith("/all") else [0, 2, 3, 5, 6]
        assert res["peers"] == expected, key
        assert res["dev"] < 1e-5, (key, res)
        assert res["exact"], key
        active = set(expected)
        counters = [{k: s[k] for k in ("wire_sent", "wire_recv", "peer_sent", "peer_recv")} for s in res["stats"]]
        assert counters == expected_counters(key.split("/")[0], active, ranks), key


@pytest.mark.slow
def test_a_vector_over_2_gib_travels_exactly_between_two_ranks() -> None:
    """2.5 GiB each way (more than 2^31 bytes, so at least three 1 GiB chunks), every value checked. It needs
    about 5.5 GiB a rank (the payload, one receive buffer, the check's pieces) and some 25 s here."""
    proc = run_job(["tests/mpi/big_message.py", str(int(2.5 * (1 << 30)))], ranks=2, timeout=600,
                   fresh=True)  # its 5.5 GiB a rank not kept by the session's ranks
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["ok"]
    assert result["bytes"] == result["wire_recv"] == [int(2.5 * (1 << 30))] * 2
