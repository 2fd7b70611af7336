"""The D-GD reconstruction of El Mrini et al. (p2pfl.curious.dgd_reconstruction, docs/privacy.md): each peer's one
update is recovered exactly where a brute-force rank test over the unknowns (x(0), Δ) written here says it is
identifiable, when the method's update is the same every round (a constant-gradient method, a --plugin below);
peers far from the colluders among them, where reconstruction-dpsgd recovers none; with a gradient that changes
with the model, identifiable peers are reconstructed only approximately; and the attack only looks."""
from __future__ import annotations

from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from test_privacy_dpsgd_attack import _graph
from test_privacy_f import metropolis, strip_curious

import p2pfl
from analysis.runs import load_run

from conftest import run_job

CONSTANT = '''
from p2pfl.algorithms import register_method
from p2pfl.algorithms.quadratic import Quadratic


@register_method("constant-gradient")
class ConstantGradient(Quadratic):
    """The quadratic problem's peers stepping along -b_i whatever their model: D-GD's update, the same each round."""

    @staticmethod
    def exact_gradient(peer, x):
        return -peer.b
'''


def brute_force(g: nx.Graph, curious: set[int], rounds: int, active: list[set[int]] | None = None,
                shared: bool = True) -> set[int]:
    """The non-curious peers whose e_(K+v) lies in the row space of the knowledge matrix over (x(0), Δ): every
    x_v(0) when `shared` (a common start; else the curious peers' own), their own Δ_a, and in round t every
    neighbour j's message x_j(t−1) + a_j(t) Δ_j with x(t) = W m(t) and W the Metropolis weights of the graph among
    the round's active peers (one sitting out keeps its model: its row of W is e_j); exact-rank test."""
    n = g.number_of_nodes()
    unit = np.eye(2 * n)
    rows = [unit[a] for a in (range(n) if shared else sorted(curious))] + [unit[n + a] for a in sorted(curious)]
    x = unit[:n]
    for t in range(1, rounds + 1):
        on = set(range(n)) if active is None else active[t - 1]
        among = nx.Graph()
        among.add_nodes_from(range(n))
        among.add_edges_from((i, j) for i, j in g.edges() if i in on and j in on)
        m = x + np.diag([1.0 if v in on else 0.0 for v in range(n)]) @ unit[n:]
        rows += [m[j] for a in sorted(curious) if a in on for j in among.neighbors(a)]
        x = metropolis(among) @ m
    k = np.array(rows)
    rank = np.linalg.matrix_rank(k)
    return {v for v in range(n) if v not in curious and np.linalg.matrix_rank(np.vstack([k, unit[n + v]])) == rank}


def _run(runs: Path, name: str, method: str, topology: str, peers: int, curious: set[int], rounds: int,
         attack: str = "reconstruction-dgd", *extra: str) -> dict:
    plugin = runs / "constant.py"
    plugin.write_text(CONSTANT)
    proc = run_job(["-m", "p2pfl.run", "--plugin", str(plugin), "--algorithm", method, "--topology", topology,
                    "--peers", str(peers), "--rounds", str(rounds), "--eval-every", str(rounds), "--dim", "5",
                    "--lr", "0.1", "--seed", "4", "--curious", ",".join(map(str, sorted(curious))),
                    "--curious-attack", attack, "--curious-tolerance", "1e-9", "--curious-coords", "5",
                    "--curious-rounds", str(rounds), "--out", str(runs), "--name", name, "--no-progress",
                    "--no-plots", *extra], ranks=0)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return load_run(runs / name).final_eval()


@pytest.mark.parametrize("topology,peers,curious,rounds", [
    ("chain", 6, {0}, 6),  # from the end of a chain: every peer, 4 of them non-neighbours
    ("cycle", 8, {0, 3}, 5),
    ("star", 5, {1}, 4),  # a leaf hears only the hub's sums
])
def test_one_update_per_peer_reconstructed_exactly_where_identifiable(runs_dir: Path, topology: str, peers: int,
                                                                      curious: set[int], rounds: int) -> None:
    final = _run(runs_dir, "dgd", "constant-gradient", topology, peers, curious, rounds)
    metrics, per_peer = final["metrics"], final["per_peer"]
    g = _graph(topology, peers)
    expected = brute_force(g, curious, rounds)
    assert metrics["curious_dgd_identifiable"] == metrics["curious_dgd_reconstructed"] == len(expected)
    far = expected - {q for a in curious for q in g.neighbors(a)}
    assert metrics["curious_dgd_reconstructed_non_neighbours"] == len(far)
    assert metrics["curious_dgd_updates_reconstructed"] == len(expected) * rounds  # every round's update
    errors = {int(p): m["curious_dgd_error"] for p, m in per_peer.items() if "curious_dgd_error" in m}
    assert {v for v, e in errors.items() if e <= 1e-9} == expected
    if topology == "chain":
        assert expected == set(range(1, peers)) and len(far) == peers - 2
        dpsgd = _run(runs_dir, "dpsgd", "constant-gradient", topology, peers, curious, rounds,
                     "reconstruction-dpsgd")["metrics"]
        assert dpsgd["curious_dpsgd_reconstructed"] == 0  # a fresh unknown each round: nothing isolated
    if topology == "star":  # the other leaves reach it only through the hub's sums: only the hub's update
        assert expected == {0}


def test_without_the_shared_start_nothing_on_the_chain_is_identifiable(runs_dir: Path) -> None:
    """x(0) unknown: each eigenmode of W shows one mixture of x(0) and Δ, and the chain's end separates nothing."""
    final = _run(runs_dir, "unknown", "constant-gradient", "chain", 6, {0}, 6, "reconstruction-dgd",
                 "--curious-start", "unknown")["metrics"]
    assert brute_force(nx.path_graph(6), {0}, 6, shared=False) == set()
    assert final["curious_dgd_identifiable"] == final["curious_dgd_reconstructed"] == 0


def test_a_changing_gradient_leaves_identifiable_peers_only_approximately_reconstructed(runs_dir: Path) -> None:
    """The quadratic problem's gradient moves with the model: the constant-update system is inconsistent, so its
    least-squares answer misses while the rank test still calls every peer identifiable; the miss shrinks with the
    step size (the gradient moves less), as the paper finds of the learning rate."""
    worst = {}
    for lr in ("0.1", "0.001"):
        final = _run(runs_dir, f"moving-{lr}", "quadratic", "chain", 6, {0}, 6, "reconstruction-dgd", "--lr", lr)
        assert final["metrics"]["curious_dgd_identifiable"] == 5
        worst[lr] = final["metrics"]["curious_dgd_error_peer_max"]
    assert final["metrics"]["curious_dgd_reconstructed"] < 5 or worst["0.001"] > 1e-9
    assert worst["0.001"] < worst["0.1"] / 10


def test_attack_only_looks_and_follows_who_sat_out(tmp_path: Path) -> None:
    """With partial participation the records equal the unwatched run's apart from the attack's fields, and the
    identifiable peers are the brute force's over the rounds' active sets (read from the schedule)."""
    options = dict(algorithm="quadratic", topology="cycle", peers=8, rounds=6, eval_every=6, dim=5, lr=0.1, seed=4,
                   participation=0.75, progress=False, plots=False)
    plain = p2pfl.simulate(out=str(tmp_path / "a"), **options)
    watched = p2pfl.simulate(out=str(tmp_path / "b"), curious="0,3", curious_attack="reconstruction-dgd",
                             curious_coords=5, curious_rounds=6, **options)
    assert strip_curious(plain) == strip_curious(watched)
    active = [set(r["active"]) for r in watched.rounds[1:]]
    assert any(len(a) < 8 for a in active)
    final = watched.summary["final"]
    assert final["curious_dgd_identifiable"] == len(brute_force(nx.cycle_graph(8), {0, 3}, 6, active))
    assert watched.manifest["curious"]["attack"] == "reconstruction-dgd"


def test_refused_for_a_method_without_updates_in_one_line(runs_dir: Path) -> None:
    proc = run_job(["-m", "p2pfl.run", "--algorithm", "consensus", "--peers", "6", "--rounds", "2", "--curious", "0",
                    "--curious-attack", "reconstruction-dgd", "--out", str(runs_dir), "--no-progress", "--no-plots"],
                   ranks=0)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("p2pfl: error: --curious-attack: reconstruction-dgd reads "
                                                           "D-PSGD")
    assert not any(runs_dir.iterdir())
