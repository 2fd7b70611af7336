"""Under mpirun: one gossip step of the runtime equals W·X computed centrally, for every topology.

Run as `mpirun -n R python tests/mpi/gossip_check.py OUT.json`; rank 0 writes, per topology, the largest
deviation from the central W·X, whether the result equals a central sum in the runtime's fixed order bit
for bit, and each rank's byte counters. Small chunks force the chunked path; partial participation is
checked too.
"""
from __future__ import annotations

import json
import sys

import networkx as nx
import numpy as np
import torch

import topologies
from p2pfl.byzantine import Robust
from p2pfl.comm import Placement, Transport, World
from p2pfl.gossip import CheckedExchange, Gossip
from p2pfl.network import NetworkSchedule

N_PEERS = 7
DIM = 1000


def main(out: str) -> None:
    world = World.detect()
    torch.set_num_threads(1)
    results = {}
    gen = torch.Generator().manual_seed(1234)
    X = torch.randn(N_PEERS, DIM, generator=gen)
    for name in ["star", "cycle", "binary-tree", "random", "complete"]:
        for active in (set(range(N_PEERS)), {0, 2, 3, 5, 6}):
            graph = topologies.build(name, N_PEERS, seed=3)
            net = NetworkSchedule(N_PEERS, seed=3, graph=graph, mixing="metropolis").at(1, active=active)
            placement = Placement(N_PEERS, world.size)
            ex = Transport(world, graph, placement, timeout=60, chunk_bytes=1000)
            mine = {p: X[p].clone() for p in placement.peers_of(world.rank) if p in active}
            mixed = Gossip(CheckedExchange(ex, world), Robust(frozenset()), seed=0).mix(mine, net, round=1).vectors
            # central reference: Metropolis recomputed on the active peers' subgraph, a dense matmul in float64
            sub = graph.subgraph(active)
            Wa = np.eye(N_PEERS)
            idx = sorted(active)
            Wa[np.ix_(idx, idx)] = topologies.mixing_matrix(nx.convert_node_labels_to_integers(sub, ordering="sorted"))
            dense = torch.from_numpy(Wa) @ X.double()
            dev, exact = 0.0, True
            for p, v in mixed.items():
                dev = max(dev, float((v.double() - dense[p]).abs().max()))
                ordered = torch.zeros(DIM)
                for j, w in net.row(p):
                    ordered.add_(X[j], alpha=w)
                exact &= bool(torch.equal(ordered, v))
            gathered = world.gather({"dev": dev, "exact": exact, "peers": sorted(mixed),
                                     "stats": ex.stats.snapshot()})
            if world.rank == 0:
                key = f"{name}/{'all' if len(active) == N_PEERS else 'partial'}"
                results[key] = {"dev": max(g["dev"] for g in gathered),
                                "exact": all(g["exact"] for g in gathered),
                                "peers": sorted(p for g in gathered for p in g["peers"]),
                                "stats": [g["stats"] for g in gathered]}
    if world.rank == 0:
        with open(out, "w") as fh:
            json.dump(results, fh)


if __name__ == "__main__":
    main(sys.argv[1])
