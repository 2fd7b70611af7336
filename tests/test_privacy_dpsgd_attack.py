"""The D-PSGD reconstruction of El Mrini et al. (p2pfl.curious.dpsgd_reconstruction, docs/privacy.md): the local
updates it reconstructs checked against a brute-force rank test over the unknowns (x(0), Δ(1), …, Δ(R)) written
here, its refusals, and the attack only looking (records unchanged apart from its fields)."""
from __future__ import annotations

from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from test_privacy_f import metropolis, one_and_two_ranks_equal, strip_curious

import p2pfl

from conftest import run_job


def brute_force(g: nx.Graph, curious: set[int], rounds: int) -> set[tuple[int, int]]:
    """The (round, peer) updates of non-curious peers whose unit vector lies in the row space of the knowledge
    matrix: the curious peers' own x_a(0) and Δ_a(t), and in round t every neighbour j's message
    m_j(t) = x_j(t−1) + Δ_j(t) with x(t) = W m(t), written out as rows over the unknowns; exact-rank test."""
    w, n = metropolis(g), g.number_of_nodes()
    unit = np.eye(n * (rounds + 1))
    rows = [unit[a] for a in sorted(curious)]
    x = unit[:n]  # x(0)'s coefficients
    for t in range(1, rounds + 1):
        m = x + unit[t * n:(t + 1) * n]
        rows += [unit[t * n + a] for a in sorted(curious)]
        rows += [m[j] for a in sorted(curious) for j in g.neighbors(a)]
        x = w @ m
    k = np.array(rows)
    rank = np.linalg.matrix_rank(k)
    return {(t, v) for t in range(1, rounds + 1) for v in range(n) if v not in curious
            and np.linalg.matrix_rank(np.vstack([k, unit[t * n + v]])) == rank}


def _quadratic(tmp: Path, topology: str, peers: int, curious: str | None, rounds: int, **extra) -> p2pfl.Run:
    options = dict(algorithm="quadratic", topology=topology, peers=peers, rounds=rounds, eval_every=rounds, dim=5,
                   lr=0.1, seed=4, out=str(tmp), progress=False, plots=False)
    options.update(extra)
    if curious is not None:
        options.update(curious=curious, curious_attack="reconstruction-dpsgd", curious_tolerance=1e-9,
                       curious_coords=5, curious_rounds=rounds)
    return p2pfl.simulate(**options)


def _graph(topology: str, peers: int) -> nx.Graph:
    return {"chain": nx.path_graph, "cycle": nx.cycle_graph}[topology](peers) if topology != "star" \
        else nx.star_graph(peers - 1)


@pytest.mark.parametrize("topology,peers,curious,rounds", [
    ("cycle", 8, {0, 3}, 5),
    ("chain", 6, {0}, 6),
    ("star", 5, {0}, 4),  # the hub hears every leaf
    ("star", 5, {1}, 4),  # a leaf hears only the hub
])
def test_updates_reconstructed_exactly_where_identifiable(tmp_path: Path, topology: str, peers: int,
                                                          curious: set[int], rounds: int) -> None:
    run = _quadratic(tmp_path, topology, peers, ",".join(map(str, sorted(curious))), rounds)
    g = _graph(topology, peers)
    expected = brute_force(g, curious, rounds)
    final = run.summary["final"]
    assert final["curious_dpsgd_updates_identifiable"] == len(expected)
    assert final["curious_dpsgd_updates_reconstructed"] == len(expected)  # within 1e-9 relative: exact
    targets = set(range(peers)) - curious
    assert not any(t == 1 for t, _ in expected)  # Δ_v(1) only ever travels as x_v(0) + Δ_v(1): never separable
    every = {v for v in targets if all((t, v) in expected for t in range(2, rounds + 1))}  # the per-peer counts
    assert final["curious_dpsgd_identifiable"] == final["curious_dpsgd_reconstructed"] == len(every)
    far = every - {q for a in curious for q in g.neighbors(a)}
    assert final["curious_dpsgd_reconstructed_non_neighbours"] == len(far)
    errors = {int(p): m["curious_dpsgd_error"] for p, m in run.final_eval()["per_peer"].items()
              if "curious_dpsgd_error" in m}
    assert set(errors) == targets
    assert not {v for v, e in errors.items() if e <= 1e-9}  # the largest error includes round 1's
    if topology == "cycle":  # some updates identifiable (the peers enclosed by the curious ones), some not
        assert 0 < len(expected) < len(targets) * rounds
        assert every  # the per-peer count is not 0 by construction: the enclosed peers from round 2 on
    if topology == "chain":  # the end hears one message a round and each round brings new unknowns: nothing isolated
        assert expected == set()
    if topology == "star" and curious == {1}:  # the other leaves only reach it through the hub's sum
        assert not any(v in (2, 3, 4) for _, v in expected)


def test_refusals_are_one_line_before_training(runs_dir: Path) -> None:
    base = ["-m", "p2pfl.run", "--algorithm", "quadratic", "--peers", "6", "--rounds", "2", "--dim", "3",
            "--out", str(runs_dir), "--no-progress", "--no-plots", "--curious", "0",
            "--curious-attack", "reconstruction-dpsgd"]
    for extra, said in ((["--compress", "top-k"], "--curious-attack: reconstruction-dpsgd reads exact messages"),
                        (["--gossip", "gradient-tracking"], "--curious-attack: reconstruction-dpsgd follows the "
                                                            "plain mix"),
                        (["--peers", "600", "--curious-rounds", "20"], "--curious-rounds: reconstruction-dpsgd "
                                                                       "solves for peers × (rounds + 1) = 12600")):
        proc = run_job([*base, *extra], ranks=0)
        assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].startswith(f"p2pfl: error: {said}"), \
            proc.stderr[-2000:]
    proc = run_job([*base[:3], "consensus", *base[4:]], ranks=0)
    assert proc.returncode == 2 and "reconstruction-dpsgd reads D-PSGD" in proc.stderr.strip().splitlines()[-1]
    assert not any(runs_dir.iterdir())


def test_attack_only_looks_records_identical_apart_from_its_fields(tmp_path: Path) -> None:
    plain = _quadratic(tmp_path / "a", "random", 9, None, 4, p=0.5, participation=0.7, eval_every=2)
    watched = _quadratic(tmp_path / "b", "random", 9, "0.3", 4, p=0.5, participation=0.7, eval_every=2,
                         curious_placement="random")

    assert strip_curious(plain) == strip_curious(watched)
    final = watched.summary["final"]
    assert final["curious_dpsgd_updates_reconstructed"] == final["curious_dpsgd_updates_identifiable"] > 0
    assert watched.manifest["curious"]["attack"] == "reconstruction-dpsgd"
    assert all(not k.startswith("curious_") for e in plain.evals for k in e["metrics"])


@pytest.mark.mpi
def test_placement_independent(runs_dir: Path) -> None:
    """1 process vs 2 ranks: every record, the attack's numbers included, bit for bit."""
    args = ["-m", "p2pfl.run", "--algorithm", "quadratic", "--dim", "4", "--rounds", "6", "--eval-every", "2",
            "--topology", "random", "--p", "0.4", "--peers", "9", "--out", str(runs_dir), "--no-progress",
            "--no-plots", "--curious", "0.25", "--curious-attack", "reconstruction-dpsgd", "--curious-rounds", "5"]
    one_and_two_ranks_equal(args, runs_dir, "curious_dpsgd_")
