"""RelaySGD (--gossip relay, SPEC §7) and --topology chain: the relay sums against closed forms (tree distances)
and the trace against this file's own implementation of the scheme (messages on directed tree edges, in numpy;
nothing of p2pfl.gossip), in float64 on the quadratic problem."""
from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import torch
from test_decentralised_optimisers import LR, SEED, D, K, _problem, _records, _x_star

import topologies
from p2pfl.byzantine import Robust
from p2pfl.comm.placement import Placement
from p2pfl.comm.transport import Transport
from p2pfl.comm.world import World
from p2pfl.gossip import CheckedExchange, Gossip
from p2pfl.gossip.schemes.relay import Relay, RelayTree
from p2pfl.network import NetworkSchedule

from conftest import run_job


def _job(runs_dir: Path, name: str, *extra: str, ranks: int = 0, rounds: int = 60, peers: int = K) -> Path:
    args = ["-m", "p2pfl.run", "--algorithm", "quadratic", "--peers", str(peers), "--rounds", str(rounds), "--dim",
            str(D), "--lr", str(LR), "--seed", str(SEED), "--gossip", "relay", "--eval-every", "0", "--out",
            str(runs_dir), "--name", name, "--no-progress", "--no-plots", *extra]
    proc = run_job(args, ranks=ranks)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return runs_dir / name


def _refused(runs_dir: Path, *extra: str) -> str:
    """The one line a relay run refused before training printed (exit status 2, no round recorded)."""
    proc = run_job(["-m", "p2pfl.run", "--algorithm", "quadratic", "--peers", "8", "--rounds", "3", "--gossip",
                    "relay", "--out", str(runs_dir), "--name", "no", "--no-progress", "--no-plots", *extra], ranks=0)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--gossip relay" in lines[0], proc.stderr
    metrics = runs_dir / "no" / "metrics.jsonl"
    assert not metrics.exists() or not metrics.read_text().strip()
    return lines[0]


# ------------------------------------------------------------------ --topology chain

def test_chain_is_the_path_graph() -> None:
    assert "chain" in topologies.names()
    for n in (2, 5, 16):
        g = topologies.build("chain", n)
        assert sorted(g.nodes) == list(range(n)) and g.number_of_edges() == n - 1
        assert sorted(tuple(sorted(e)) for e in g.edges) == [(i, i + 1) for i in range(n - 1)]
        assert nx.is_tree(g) and nx.diameter(g) == n - 1


# ------------------------------------------------------------------ the test's own RelaySGD (numpy, per edge)

def _tree_edges(graph: nx.Graph) -> set[tuple[int, int]]:
    """The spanning tree the SPEC names: the graph if it is a tree, else BFS from 0 (both directions)."""
    tree = graph if nx.is_tree(graph) else nx.bfs_tree(graph, 0).to_undirected()
    return {(i, j) for i, j in tree.edges} | {(j, i) for i, j in tree.edges}


class DenseRelay:
    """RelaySGD on directed tree edges: m[i, j], c[i, j] the last message and count j received from i. A link
    that is down in a round delivers nothing (j keeps m[i, j]); `up(i, j)` says whether i reaches j."""

    def __init__(self, edges: set[tuple[int, int]], x0: np.ndarray) -> None:
        self.edges, self.x0, self.n = sorted(edges), x0, len(x0)
        self.m = {e: np.zeros(x0.shape[1]) for e in self.edges}
        self.c = {e: 0.0 for e in self.edges}

    def into(self, j: int) -> list[int]:
        return [i for i, k in self.edges if k == j]

    def round(self, half: np.ndarray, up=lambda i, j: True) -> np.ndarray:
        new_m = {(i, j): half[i] + sum((self.m[k, i] for k in self.into(i) if k != j), np.zeros_like(half[i]))
                 for i, j in self.edges}
        new_c = {(i, j): 1 + sum(self.c[k, i] for k in self.into(i) if k != j) for i, j in self.edges}
        for e in self.edges:
            if up(*e):
                self.m[e], self.c[e] = new_m[e], new_c[e]
        out = np.empty_like(half)
        for i in range(self.n):
            total = half[i] + sum((self.m[k, i] for k in self.into(i)), np.zeros_like(half[i]))
            out[i] = (total + (self.n - 1 - sum(self.c[k, i] for k in self.into(i))) * self.x0[i]) / self.n
        return out


def _carried(adjacency: np.ndarray | None):
    """Whether a round's network carries the link i -> j (A[j, i]: j hears from i); every link without one."""
    return lambda i, j: adjacency is None or bool(adjacency[j, i])


# ------------------------------------------------------------------ the relay sums, driving the real step

def _in_process(graph: nx.Graph, **network) -> tuple[Gossip, NetworkSchedule]:
    world = World.detect()
    transport = Transport(world, graph, Placement(graph.number_of_nodes(), 1), timeout=30)
    return Gossip(CheckedExchange(transport, world), Robust(frozenset()), seed=0), NetworkSchedule(
        graph.number_of_nodes(), SEED, graph=graph, **network)


GRAPHS = {"chain": lambda: topologies.build("chain", 8),
          "binary-tree": lambda: topologies.build("binary-tree", 10),
          "cycle-bfs": lambda: topologies.build("cycle", 9),
          "random-bfs": lambda: topologies.build("random", 10, p=0.4)}


@pytest.mark.parametrize("name", GRAPHS)
def test_messages_carry_exact_subtree_sums(name: str) -> None:
    """Models held fixed (G = 0): after t rounds x_i + Σ_j m_{j→i} is the sum of the peers within tree distance t
    of i and Σ_j c_{j→i} their number less one; from diam(T) rounds on, the whole network's sum and K − 1, and
    every peer holds the exact average."""
    graph = GRAPHS[name]()
    n = graph.number_of_nodes()
    tree = nx.Graph(sorted(_tree_edges(graph)))
    same = {frozenset(e) for e in tree.edges} == {frozenset(e) for e in graph.edges}
    assert tree.number_of_edges() == n - 1 and (name.endswith("bfs") or same)
    distance = dict(nx.all_pairs_shortest_path_length(tree))
    gossip, schedule = _in_process(graph)
    relay_tree = RelayTree.of(graph)
    x = {p: torch.randn(D, dtype=torch.float64, generator=torch.Generator().manual_seed(p)) for p in range(n)}
    state: dict[int, dict[str, torch.Tensor]] = {p: {} for p in range(n)}
    total = sum(x.values())
    diameter = nx.diameter(tree)
    for t in range(1, diameter + 3):
        mixed = Relay(relay_tree).round(gossip, x, {p: torch.zeros(D, dtype=torch.float64) for p in x}, LR, state,
                                        schedule.at(t), t)
        for i in range(n):
            near = [k for k in range(n) if distance[i][k] <= t]
            sums = x[i] + sum(state[i][f"m{j}"] for j in tree[i])
            counts = sum(float(state[i][f"c{j}"]) for j in tree[i])
            assert torch.allclose(sums, sum(x[k] for k in near), rtol=1e-13, atol=1e-13)
            assert counts == len(near) - 1
            if t >= diameter:
                assert counts == n - 1
                assert torch.allclose(mixed.vectors[i], total / n, rtol=1e-13, atol=1e-14)
        if t < diameter:
            assert any(not torch.allclose(v, total / n) for v in mixed.vectors.values())


def test_a_failed_tree_link_leaves_its_last_message() -> None:
    """Link failure 0.4 on a binary tree, fixed models and G = 0: the real step equals the test's relay in which
    a down link delivers nothing (the receiver keeps the last message), round after round; once the links are
    all back for diam(T) rounds the sums are exact again."""
    graph = topologies.build("binary-tree", 10)
    n = graph.number_of_nodes()
    gossip, schedule = _in_process(graph, link_failure=0.4)
    _, calm = _in_process(graph)
    relay_tree = RelayTree.of(graph)
    x = {p: torch.randn(D, dtype=torch.float64, generator=torch.Generator().manual_seed(p)) for p in range(n)}
    X = torch.stack([x[p] for p in range(n)]).numpy()
    dense = DenseRelay(_tree_edges(graph), X)
    state: dict[int, dict[str, torch.Tensor]] = {p: {} for p in range(n)}
    failed = 0
    for t in range(1, 31):
        net = schedule.at(t) if t <= 20 else calm.at(t)
        failed += sum(not net.adjacency.toarray()[j, i] for i, j in dense.edges)
        mixed = Relay(relay_tree).round(gossip, x, {p: torch.zeros(D, dtype=torch.float64) for p in x}, LR, state,
                                        net, t)
        want = dense.round(X, up=_carried(net.adjacency.toarray()))
        got = torch.stack([mixed.vectors[p] for p in range(n)]).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)
    assert failed > 20  # the failures happened
    np.testing.assert_allclose(got, np.tile(X.mean(0), (n, 1)), rtol=1e-13, atol=1e-14)


# ------------------------------------------------------------------ end to end on the quadratic problem

def _dense_trace(graph: nx.Graph, rounds: int, zeta2: float, network=None) -> np.ndarray:
    """The error trace (round 0 first) of the test's relay on the quadratic problem; `network(t)` the round's
    RoundNetwork (for its failed links), None for a network that never fails."""
    a, b = _problem(zeta2)
    x_star = _x_star(a, b)
    X = np.ones((K, D))
    dense = DenseRelay(_tree_edges(graph), X.copy())
    errors = [np.mean((X - x_star) ** 2)]
    for t in range(1, rounds + 1):
        half = X - LR * a[:, None] * (a[:, None] * X - b)
        X = dense.round(half, _carried(None if network is None else network(t).adjacency.toarray()))
        errors.append(np.mean((X - x_star) ** 2))
    return np.array(errors)


@pytest.mark.parametrize("topology", ["chain", "cycle"])
def test_trace_equals_the_test_implementation(runs_dir: Path, topology: str) -> None:
    """Heterogeneous quadratics (ζ² = 10) on the chain and on the BFS tree of the ring: the same trace."""
    got = np.array([r["error"] for r in _records(_job(runs_dir, topology, "--topology", topology, "--zeta2",
                                                      "10", rounds=80))])
    want = _dense_trace(topologies.build(topology, K), 80, 10.0)
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-30)
    assert want[-1] < 1e-3 * want[0]


def test_trace_under_link_failures(runs_dir: Path) -> None:
    graph = topologies.build("chain", K)
    schedule = NetworkSchedule(K, SEED, graph=graph, link_failure=0.3)
    got = np.array([r["error"] for r in _records(_job(runs_dir, "lf", "--topology", "chain", "--link-failure",
                                                      "0.3", rounds=60))])
    np.testing.assert_allclose(got, _dense_trace(graph, 60, 1.0, schedule.at), rtol=1e-11, atol=1e-30)


def test_manifest_names_the_tree(runs_dir: Path) -> None:
    """A tree topology is its own tree; the ring's is the BFS tree from peer 0 (its tree distances from 0 are the
    ring's)."""
    chain = json.loads((_job(runs_dir, "c", "--topology", "chain", rounds=2) / "manifest.json").read_text())
    assert chain["relay_tree"] == {"source": "topology", "root": 0, "edges": [[i, i + 1] for i in range(K - 1)]}
    ring = json.loads((_job(runs_dir, "r", "--topology", "cycle", rounds=2) / "manifest.json").read_text())
    entry = ring["relay_tree"]
    assert entry["source"] == "bfs-spanning-tree" and entry["root"] == 0
    tree = nx.Graph([tuple(e) for e in entry["edges"]])
    cycle = topologies.build("cycle", K)
    assert nx.is_tree(tree) and tree.number_of_nodes() == K and all(cycle.has_edge(*e) for e in tree.edges)
    assert nx.single_source_shortest_path_length(tree, 0) == nx.single_source_shortest_path_length(cycle, 0)


def test_bytes_are_d_plus_one_values_per_tree_link(runs_dir: Path) -> None:
    """Each of the chain's 2(K − 1) directed tree links carries m and c: d + 1 float64 values a round."""
    records = _records(_job(runs_dir, "bytes", "--topology", "chain", rounds=3))
    assert all(r["bytes_sent"] == 2 * (K - 1) * (D + 1) * 8 for r in records[1:])


@pytest.mark.parametrize("extra,says", [(("--topology", "one-peer-exponential"), "one-way"),
                                        (("--topology", "random", "--resample"), "resample"),
                                        (("--topology", "cycle", "--weight-by-data"), "uniformly")])
def test_changing_graphs_and_weighting_are_refused_in_one_line(runs_dir: Path, extra: tuple, says: str) -> None:
    assert says in _refused(runs_dir, *extra)
