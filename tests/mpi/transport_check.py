"""Under mpirun: the transport's properties, each checked against payloads every rank can recompute.

Run as `mpirun -n R python tests/mpi/transport_check.py OUT.json`; rank 0 writes, per check, whether every
rank received exactly what was sent and the first failure seen. 6 peers on R ranks (co-located and remote
senders both), a complete graph, one-way links drawn per call from a seed every rank shares.
"""
from __future__ import annotations

import json
import sys

import networkx as nx
import torch

from p2pfl.comm import Placement, Transport, World

N_PEERS = 6
DTYPES = (torch.float32, torch.float64, torch.int64, torch.bfloat16, torch.uint8, torch.bool, torch.complex128,
          torch.complex64)


def payload(peer: int, call: int) -> torch.Tensor:
    """What `peer` sends in call `call`: its size, shape and dtype change with the peer and the call."""
    gen = torch.Generator().manual_seed(1000 * call + peer)
    n = (peer * 37 + call * 11) % 50  # 0 (an empty payload) to 49 rows
    dtype = DTYPES[(peer + call) % len(DTYPES)]
    x = torch.randn(n, 1 + call % 3, generator=gen) * 100
    return x.to(dtype) if dtype != torch.bool else x > 0


def links_of(call: int) -> dict[int, tuple[int, ...]]:
    """One-way links drawn for the call (the same on every rank): each receiver hears from a subset."""
    gen = torch.Generator().manual_seed(77 + call)
    return {p: tuple(q for q in range(N_PEERS) if q != p and bool(torch.rand(1, generator=gen) < 0.6))
            for p in range(N_PEERS)}


def check(inbox: dict[int, dict[int, torch.Tensor]], call: int, links: dict[int, tuple[int, ...]],
          local: list[int]) -> str | None:
    """None when every local receiver got exactly its senders' payloads of `call`, else what differs."""
    for p in local:
        if sorted(inbox.get(p, {})) != sorted(links[p]):
            return f"call {call}: peer {p} heard from {sorted(inbox.get(p, {}))}, expected {sorted(links[p])}"
        for q, got in inbox[p].items():
            want = payload(q, call)
            if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
                return f"call {call}: peer {p} from {q}: {got.dtype} {tuple(got.shape)}, sent {want.dtype} " \
                       f"{tuple(want.shape)}"
    return None


def main(out: str, pack: int | None = None) -> None:
    world = World.detect()
    torch.set_num_threads(1)
    placement = Placement(N_PEERS, world.size)
    local = placement.peers_of(world.rank)
    options = {} if pack is None else {"pack_bytes": pack}
    transport = Transport(world, nx.complete_graph(N_PEERS), placement, timeout=60, chunk_bytes=64, **options)
    failures: dict[str, str | None] = {}

    def run(name: str, calls: list[int], how: str) -> None:
        sent = {c: {p: payload(p, c) for p in local} for c in calls}
        if how == "blocking":
            results = {c: transport.exchange(sent[c], round=1, links=links_of(c)) for c in calls}
        elif how == "interleaved":  # all started first, waited in reverse order
            pending = {c: transport.start(sent[c], round=1, links=links_of(c)) for c in calls}
            results = {c: pending[c].wait() for c in reversed(calls)}
        else:  # overlapped with computation, then compared with the blocking exchange of the same payloads
            pending = transport.start(sent[calls[0]], round=1, links=links_of(calls[0]))
            a = torch.randn(200, 200, generator=torch.Generator().manual_seed(world.rank))
            for _ in range(50):
                a = torch.tanh(a @ a.T / 200)
            overlapped = pending.wait()
            blocking = transport.exchange(sent[calls[0]], round=1, links=links_of(calls[0]))
            same = all(torch.equal(overlapped[p][q], blocking[p][q]) for p in overlapped for q in overlapped[p])
            failures[name] = check(overlapped, calls[0], links_of(calls[0]), local) or (
                None if same and sorted(overlapped) == sorted(blocking) else "overlapped != blocking")
            return
        first = {c: {p: {q: v.clone() for q, v in got.items()} for p, got in results[c].items()} for c in calls}
        problem = next((m for c in calls if (m := check(results[c], c, links_of(c), local))), None)
        # no later call overwrote an earlier one's tensors: they still hold what was checked
        kept = all(torch.equal(results[c][p][q], first[c][p][q]) for c in calls for p in results[c]
                   for q in results[c][p])
        failures[name] = problem or (None if kept else "a later call overwrote an earlier call's inbox")

    run("sizes_per_link_and_round", [1, 2, 3, 4], "blocking")
    run("two_calls_in_flight", [5, 6], "interleaved")
    run("many_calls_a_round", list(range(7, 27)), "blocking")  # 20 calls: more than the old 7 message kinds
    run("overlapped_equals_blocking", [27], "overlapped")
    # a released call's receive buffers serve the next call of the same sizes, which still arrives exactly
    sent = {p: payload(p, 28) for p in local}
    first = transport.start(sent, round=1, links=links_of(28))
    remote = {(p, q): v.data_ptr() for p, got in first.wait().items() for q, v in got.items()
              if placement.rank_of(q) != world.rank and v.numel()}
    first.release()
    again = transport.start(sent, round=1, links=links_of(28)).wait()
    reused = {(p, q): v.data_ptr() for p, got in again.items() for q, v in got.items() if (p, q) in remote}
    failures["released_buffers_reused"] = check(again, 28, links_of(28), local) or (
        None if set(reused.values()) == set(remote.values()) else "released buffers were not reused")
    gathered = world.gather({"failures": failures, "calls": transport.calls})
    if world.rank == 0:
        merged = {k: next((g["failures"][k] for g in gathered if g["failures"][k]), None) for k in failures}
        with open(out, "w") as fh:
            json.dump({"failures": merged, "calls": [g["calls"] for g in gathered]}, fh)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)
