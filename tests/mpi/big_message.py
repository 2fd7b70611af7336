"""Under `mpirun -n 2`: peers 0 and 1 (one per rank) swap vectors of more than 2^31 bytes, checked exactly.

Each payload is int32 0, 1, 2, ... offset by the peer (2.5 GiB at the default size); the check regenerates the
expected values piece by piece so that a rank holds only its payload and one receive buffer. Prints one JSON line
from rank 0: the bytes moved, whether both sides matched, and the seconds the exchange took.
"""
from __future__ import annotations

import json
import sys
import time

import networkx as nx
import torch

from p2pfl.comm import Placement, Transport, World

PIECE = 1 << 26


def main(n_bytes: int) -> None:
    world = World.detect()
    assert world.size == 2, "run on 2 ranks"
    graph = nx.Graph([(0, 1)])
    placement = Placement(2, 2)
    exchange = Transport(world, graph, placement, timeout=600)
    me = world.rank
    n = n_bytes // 4
    payload = torch.arange(n, dtype=torch.int32)
    payload.add_(me)
    t0 = time.perf_counter()
    inbox = exchange.exchange({me: payload}, round=1)
    seconds = time.perf_counter() - t0
    got = inbox[me][1 - me]
    ok = got.numel() == n
    for start in range(0, n, PIECE):
        stop = min(n, start + PIECE)
        ok &= bool(torch.equal(got[start:stop], torch.arange(start, stop, dtype=torch.int32) + (1 - me)))
    results = world.gather({"ok": ok, "seconds": seconds, "bytes": got.numel() * 4,
                            "wire_recv": sum(exchange.stats.wire_recv.values())})
    if me == 0:
        print(json.dumps({"ok": all(r["ok"] for r in results), "bytes": [r["bytes"] for r in results],
                          "wire_recv": [r["wire_recv"] for r in results],
                          "seconds": max(r["seconds"] for r in results)}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else int(2.5 * (1 << 30)))
