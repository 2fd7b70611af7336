"""Curious-neighbour attacks (p2pfl.curious, docs/privacy.md): where the curious peers sit, the
reconstruction of El Mrini et al. checked against a brute-force knowledge matrix built here, the membership
inference's AUC against its sampling error, and the attacks only looking (records unchanged apart from theirs)."""
from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

import p2pfl
from p2pfl.curious.placement import choose_curious, parse_curious
from p2pfl.curious.reconstruction import knowledge_solve

from conftest import run_job, timing_free_records

# --- placement --------------------------------------------------------------------------------------------------

def test_placement_by_degree_centrality_and_at_random() -> None:
    g = nx.barbell_graph(4, 3)  # bells 0-3 and 7-10 (joints 3 and 7, degree 4), path 4-5-6 (5 the most central)
    assert choose_curious("0.15", g, "degree", 0) == {3, 7}  # ⌈0.15·11⌉ = 2
    assert choose_curious("5%", g, "centrality", 0) == {5}  # ⌈0.55⌉ = 1
    assert choose_curious("2,9", g, "degree", 0) == {2, 9}  # a list is taken as it is
    drawn = [choose_curious("0.3", g, "random", seed) for seed in range(6)]
    assert all(len(d) == 4 for d in drawn) and drawn[0] == choose_curious("0.3", g, "random", 0)
    assert len(set(drawn)) > 1  # the seed draws them
    with pytest.raises(ValueError, match="--curious: peer 11 does not exist"):
        choose_curious("11", g, "degree", 0)
    for bad in ("1.5", "0.0", "x", "-1", "", "3,,4"):
        with pytest.raises(ValueError, match="^--curious: "):
            parse_curious(bad)


def test_bad_curious_input_is_one_line_before_training(runs_dir: Path) -> None:
    base = ["-m", "p2pfl.run", "--algorithm", "consensus", "--peers", "6", "--rounds", "2", "--vector-size", "4",
            "--out", str(runs_dir), "--no-progress", "--no-plots"]
    for extra, said in ((["--curious", "6"], "--curious: peer 6 does not exist"),
                        (["--curious", "150%"], "--curious: a fraction of the peers lies in (0, 1)"),
                        (["--curious", "0", "--compress", "top-k"], "--curious-attack: reconstruction reads exact")):
        proc = run_job([*base, *extra], ranks=0)
        assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].startswith(f"p2pfl: error: {said}"), \
            proc.stderr[-2000:]
    assert not any(runs_dir.iterdir())


# --- reconstruction ---------------------------------------------------------------------------------------------

def metropolis(g: nx.Graph) -> np.ndarray:
    """W_ij = 1 / (1 + max(d_i, d_j)) on the edges, the rest on the diagonal (written here, not the package's)."""
    n = g.number_of_nodes()
    w = np.zeros((n, n))
    for i, j in g.edges():
        w[i, j] = w[j, i] = 1 / (1 + max(g.degree(i), g.degree(j)))
    return w + np.diag(1 - w.sum(axis=1))


def brute_force(g: nx.Graph, curious: set[int], rounds: int) -> set[int]:
    """The non-curious peers whose unit vector lies in the row space of the knowledge matrix: the curious peers'
    own values, then in round t every neighbour j's x_j(t−1) = (W^{t−1})_j x(0); e_v is in the row space exactly
    when appending it leaves the rank unchanged (exact-rank test of numpy, float64)."""
    w, n = metropolis(g), g.number_of_nodes()
    rows = [np.eye(n)[a] for a in sorted(curious)]
    power = np.eye(n)
    for _ in range(rounds):
        rows += [power[j] for a in curious for j in g.neighbors(a)]
        power = w @ power
    m = np.array(rows)
    rank = np.linalg.matrix_rank(m)
    return {v for v in range(n) if v not in curious and np.linalg.matrix_rank(np.vstack([m, np.eye(n)[v]])) == rank}


def _consensus(tmp: Path, topology: str, peers: int, curious: str | None, rounds: int = 6, **extra) -> p2pfl.Run:
    options = dict(algorithm="consensus", topology=topology, peers=peers, rounds=rounds, eval_every=2,
                   vector_size=5, vector_dtype="float64", seed=4, out=str(tmp), progress=False, plots=False, **extra)
    if curious is not None:
        options.update(curious=curious, curious_tolerance=1e-9, curious_coords=5)
    return p2pfl.simulate(**options)


@pytest.mark.parametrize("topology,peers,curious,rounds", [
    ("cycle", 8, {0, 3}, 6),  # the condition holds for every peer, non-neighbours included
    ("star", 5, {1}, 6),  # a leaf sees only the hub: the other leaves are interchangeable (only their sum leaks)
    ("chain", 7, {0}, 1),  # one round: the end peer knows its neighbour's value and nothing more
    ("chain", 7, {0}, 8),  # enough rounds: the whole path
])
def test_reconstruction_exact_where_the_condition_holds(tmp_path: Path, topology: str, peers: int,
                                                        curious: set[int], rounds: int) -> None:
    run = _consensus(tmp_path, topology, peers, ",".join(map(str, sorted(curious))), rounds=rounds)
    g = nx.path_graph(peers) if topology == "chain" else (nx.cycle_graph(peers) if topology == "cycle"
                                                         else nx.star_graph(peers - 1))
    expected = brute_force(g, curious, rounds)
    final = run.summary["final"]
    errors = {int(p): m["curious_error"] for p, m in run.final_eval()["per_peer"].items() if "curious_error" in m}
    assert set(errors) == set(range(peers)) - curious
    assert {p for p, e in errors.items() if e <= 1e-9} == expected  # exactly the peers the condition names
    assert final["curious_identifiable"] == len(expected)
    assert final["curious_reconstructed"] == len(expected)  # within 1e-9 relative: exact in float64
    far = expected - {q for a in curious for q in g.neighbors(a)}
    assert final["curious_reconstructed_non_neighbours"] == len(far)
    if topology == "star":
        assert expected == {0} and final["curious_reconstructed"] == 1  # fails for the 3 other leaves
    if topology == "cycle":
        assert len(far) == peers - 6  # every non-neighbour reconstructed


def test_knowledge_solve_recovers_exactly_the_identifiable_columns() -> None:
    rng = np.random.default_rng(0)
    n = 9
    m = rng.normal(size=(5, n))
    m = np.vstack([m, np.eye(n)[2], np.eye(n)[7], m[0] + m[1]])  # 7 independent rows, 2 of them unit vectors
    x = rng.normal(size=(n, 3))
    y = m @ x
    for _ in range(2):  # reduced once, the reduced system solves the same
        m, y, estimate, projected = knowledge_solve(m, y)
        assert m.shape[0] == 7
        identifiable = projected > 1 - 1e-9
        assert set(np.flatnonzero(identifiable)) == {2, 7}
        assert np.allclose(estimate[[2, 7]], x[[2, 7]], rtol=0, atol=1e-12)
        assert not np.allclose(estimate[0], x[0], atol=1e-3)


def strip_curious(run: p2pfl.Run) -> list[dict]:
    """The run's timing-free records without the curious attacks' fields (every `curious_` metric)."""
    out = []
    for record in timing_free_records(Path(run.path)):
        if "metrics" in record:
            record["metrics"] = {k: v for k, v in record["metrics"].items() if not k.startswith("curious_")}
        if "per_peer" in record:
            record["per_peer"] = {p: {k: v for k, v in m.items() if not k.startswith("curious_")}
                                  for p, m in record["per_peer"].items()}
        out.append(record)
    return out


def test_attack_only_looks_records_identical_apart_from_its_fields(tmp_path: Path) -> None:
    plain = _consensus(tmp_path / "a", "random", 9, None, p=0.5, participation=0.7)
    watched = _consensus(tmp_path / "b", "random", 9, "0.3", p=0.5, participation=0.7, curious_placement="random")

    assert strip_curious(plain) == strip_curious(watched)
    assert any("curious_reconstructed" in e["metrics"] for e in watched.evals)
    assert all(not k.startswith("curious_") for e in plain.evals for k in e["metrics"])
    assert "curious" not in plain.manifest and watched.manifest["curious"]["attack"] == "reconstruction"
    final = watched.summary["final"]  # partial participation: the absent peers' rows of W are the identity's
    assert final["curious_reconstructed"] == final["curious_identifiable"] > 0
    assert {k: v for k, v in plain.summary["final"].items()} == {k: v for k, v in watched.summary["final"].items()
                                                                if not k.startswith("curious_")}


# --- membership inference -----------------------------------------------------------------------------------------

def test_auc_is_mann_whitney_with_ties_half() -> None:
    from scipy.stats import mannwhitneyu

    from p2pfl.curious.auc import accuracy, auc, threshold
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 5, 40).astype(float), rng.integers(0, 6, 30).astype(float)  # many ties
    u = mannwhitneyu(a, b, alternative="two-sided", method="asymptotic").statistic  # U of `a`, ties counted ½
    assert auc(a, b) == pytest.approx(u / (40 * 30), abs=1e-15)
    assert auc(np.array([3.0, 2.0]), np.array([1.0, 2.0])) == (1 + 1 + 0.5 + 1) / 4  # by hand
    at = threshold(np.array([5.0, 4.0, 3.0]), np.array([1.0, 2.0, 3.5]))
    # 3 and 4 both give balanced accuracy (1 + 2/3) / 2: ties go to the lower
    assert at == 3.0 and accuracy(np.array([5.0, 4.0, 3.0]), np.array([1.0, 2.0, 3.5]), at) == (1 + 2 / 3) / 2
    assert threshold(np.array([5.0, 4.0]), np.array([1.0, 2.0])) == 4.0  # separable: the lowest member score


def noise_csv(path: Path) -> str:
    """Random feature vectors with random labels (4 classes), a table read without augmentation: nothing to
    generalise, so what a model learns of its shard is memorisation; train and test (--test-split) drawn alike."""
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(480, 24)), rng.integers(0, 4, size=480)
    rows = [",".join(f"f{i}" for i in range(24)) + ",label"]  # the label: the last column
    rows += [",".join(f"{v:.6f}" for v in row) + f",c{label}" for label, row in zip(y, x)]
    path.write_text("\n".join(rows) + "\n")
    return f"csv:{path}"


def _dec_sl(tmp: Path, curious: str | None, **extra) -> p2pfl.Run:
    tmp.mkdir(parents=True, exist_ok=True)
    options = dict(algorithm="dec-sl", dataset=noise_csv(tmp / "noise.csv"), test_split=0.5,
                   partition="iid", model="mlp",
                   topology="cycle", peers=6, rounds=2, eval_every=1, optimizer="adam", batch_size=20, seed=2,
                   out=str(tmp), progress=False, plots=False)
    options.update(extra)
    if curious is not None:
        options.update(curious=curious, curious_attack="membership", curious_samples=40)
    return p2pfl.simulate(**options)


def test_membership_auc_half_for_an_untrained_model_and_high_for_an_overfit_peer(tmp_path: Path) -> None:
    from p2pfl.curious.auc import null_sd
    sd = null_sd(40, 40)
    # lr 1e-9: every model received is, to the last digits, the initial one, trained on no one's data
    untrained = _dec_sl(tmp_path / "u", "0,3", lr=1e-9, local_steps=1)
    final = untrained.final_eval()["per_peer"]
    aucs = [m["curious_mia_auc"] for m in final.values() if "curious_mia_auc" in m]
    assert len(aucs) == 4  # the neighbours 1, 5, 2, 4 of 0 and 3
    assert all(abs(a - 0.5) <= 3.5 * sd for a in aucs), aucs
    assert abs(np.mean(aucs) - 0.5) <= 3 * sd, aucs  # (the victims share no member, but may share non-members)
    # 40 samples a peer with random labels, 60 Adam steps on them: each victim's sent model memorised its shard
    overfit = _dec_sl(tmp_path / "o", "0,3", lr=1e-2, local_steps=60)
    final = overfit.final_eval()["per_peer"]
    aucs = [m["curious_mia_auc"] for m in final.values() if "curious_mia_auc" in m]
    assert len(aucs) == 4 and all(a > 0.5 + 3 * sd for a in aucs), aucs
    assert overfit.final_eval()["metrics"]["curious_mia_acc_peer_mean"] > 0.6


def test_membership_only_looks(tmp_path: Path) -> None:
    plain = _dec_sl(tmp_path / "a", None, lr=1e-2, local_steps=3)
    watched = _dec_sl(tmp_path / "b", "0.3", lr=1e-2, local_steps=3, curious_placement="random")

    def strip(run: p2pfl.Run) -> list[dict]:
        out = []
        for record in timing_free_records(Path(run.path)):
            if "metrics" in record:
                record["metrics"] = {k: v for k, v in record["metrics"].items() if not k.startswith("curious_")}
            if "per_peer" in record:  # a victim the evaluation does not score appears for the attack's numbers only
                kept = {p: {k: v for k, v in m.items() if not k.startswith("curious_")}
                        for p, m in record["per_peer"].items()}
                record["per_peer"] = {p: m for p, m in kept.items() if m}
            out.append(record)
        return out

    assert strip(plain) == strip(watched)
    assert watched.final_eval()["metrics"]["curious_mia_victims"] > 0


@pytest.mark.mpi
@pytest.mark.parametrize("attack", ["reconstruction", "membership"])
def test_attacks_placement_independent(runs_dir: Path, attack: str) -> None:
    """1 process vs 2 ranks: every record, the attack's numbers included, bit for bit."""
    common = ["--out", str(runs_dir), "--no-progress", "--no-plots", "--curious", "0.25", "--curious-attack", attack,
              "--topology", "random", "--p", "0.4", "--peers", "9", "--eval-every", "2"]
    if attack == "reconstruction":
        args = ["-m", "p2pfl.run", "--algorithm", "consensus", "--rounds", "8", "--vector-size", "6",
                "--curious-placement", "centrality", *common]
    else:
        args = ["-m", "p2pfl.run", "--algorithm", "dec-sl", "--model", "mlp", "--rounds", "2", "--local-steps", "4",
                "--dataset", noise_csv(runs_dir / "noise.csv"), "--test-split", "0.5", "--batch-size", "10",
                "--curious-samples", "12", "--dtype", "float64", "--partition", "dirichlet", *common]
        # float64: as the core's own 1-vs-2 tests. Dirichlet: the split this test was written on (own data is split
        # iid by default since issue 56); on iid shards a rank's peers train as one stacked computation, whose
        # float64 results differ in the last bit with the stack's size (1 ulp of drift_to_avg between 1 and 2 ranks):
        # a known gap of --batch-peers, not of the attack this test checks
    one_and_two_ranks_equal(args, runs_dir, "curious_")


def one_and_two_ranks_equal(args: list[str], runs_dir: Path, prefix: str) -> None:
    """Run `python ARGS` in one process and under 2 ranks: every record equal bit for bit, some metric `prefix`…"""
    for ranks, name in ((2, "two"), (0, "one")):
        proc = run_job([*args, "--name", name], ranks=ranks)
        assert proc.returncode == 0, proc.stderr[-3000:]
    one, two = (timing_free_records(runs_dir / n) for n in ("one", "two"))
    assert one == two and any(k.startswith(prefix) for r in one for k in r.get("metrics", {}))
    assert json.loads((runs_dir / "two" / "manifest.json").read_text())["world_size"] == 2
