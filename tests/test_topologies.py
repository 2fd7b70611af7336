"""Tests for topologies/: generators against closed forms, mixing matrices against SPEC §1, reference spectra."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

import topologies
from topologies import TopologyError, build, describe, mixing_matrix, mixing_of, statistics

ROOT = Path(__file__).resolve().parents[1]


def edge_set(g: nx.Graph) -> set[tuple[int, int]]:
    return {(min(u, v), max(u, v)) for u, v in g.edges}


# --- generators ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 7, 20])
def test_star(n: int) -> None:
    g = build("star", n)
    assert sorted(g.nodes) == list(range(n))
    assert edge_set(g) == {(0, k) for k in range(1, n)}
    assert g.degree[0] == n - 1 and all(g.degree[k] == 1 for k in range(1, n))


@pytest.mark.parametrize("n", [3, 4, 9, 20])
def test_cycle(n: int) -> None:
    g = build("cycle", n)
    assert g.number_of_edges() == n
    assert all(d == 2 for _, d in g.degree)
    assert all(g.has_edge(i, (i + 1) % n) and g.has_edge(i, (i - 1) % n) for i in range(n))


def test_cycle_of_two_is_one_edge() -> None:
    assert edge_set(build("cycle", 2)) == {(0, 1)}


@pytest.mark.parametrize("n", [2, 5, 15, 20])
def test_binary_tree(n: int) -> None:
    g = build("binary-tree", n)
    assert g.number_of_edges() == n - 1 and nx.is_tree(g)
    assert edge_set(g) == {((k - 1) // 2, k) for k in range(1, n)}
    assert all(g.degree[k] <= 3 for k in range(n)) and g.degree[0] == min(2, n - 1)


@pytest.mark.parametrize("n", [2, 6, 20])
def test_complete(n: int) -> None:
    g = build("complete", n)
    assert g.number_of_edges() == n * (n - 1) // 2
    assert all(d == n - 1 for _, d in g.degree)


def test_names_and_underscores() -> None:
    assert set(topologies.names()) >= {"star", "cycle", "binary-tree", "random", "complete", "file"}
    assert edge_set(build("binary_tree", 9)) == edge_set(build("binary-tree", 9))
    assert build("Binary_Tree", 4).graph["topology"] == "binary-tree"


def test_unknown_name_lists_known_ones() -> None:
    with pytest.raises(TopologyError, match="known: .*binary-tree.*star"):
        build("moebius", 5)
    assert issubclass(TopologyError, ValueError)


@pytest.mark.parametrize("n", [1, 0, -3, 2.5])
def test_too_few_peers(n: object) -> None:
    with pytest.raises(TopologyError, match="n >= 2"):
        build("star", n)  # type: ignore[arg-type]


def test_unknown_parameter_rejected_but_none_ignored() -> None:
    with pytest.raises(TopologyError, match="star.*does not take p"):
        build("star", 5, p=0.3)
    assert build("star", 5, p=None).number_of_edges() == 4


def test_register_new_topology() -> None:
    @topologies.register("test-path")
    def path(n: int, seed: int = 0) -> nx.Graph:
        return nx.path_graph(n)

    try:
        assert "test-path" in topologies.names()
        assert build("test_path", 4).number_of_edges() == 3
        with pytest.raises(TopologyError, match="already registered"):
            topologies.register("test-path")(path)
    finally:
        del topologies.registry["test-path"]


def test_generated_self_loop_and_outside_nodes_rejected() -> None:
    @topologies.register("test-bad")
    def bad(n: int, seed: int = 0, kind: str = "loop") -> nx.Graph:
        g = nx.path_graph(n)
        g.add_edge(0, 0 if kind == "loop" else n)
        return g

    try:
        with pytest.raises(TopologyError, match="self-loop"):
            build("test-bad", 4)
        with pytest.raises(TopologyError, match="outside 0..3"):
            build("test-bad", 4, kind="outside")
    finally:
        del topologies.registry["test-bad"]


# --- random graphs --------------------------------------------------------------------------------------------


def test_random_is_seeded() -> None:
    a, b, c = build("random", 20, seed=3, p=0.5), build("random", 20, seed=3, p=0.5), build("random", 20, 4, p=0.5)
    assert edge_set(a) == edge_set(b)
    assert edge_set(a) != edge_set(c)
    assert nx.is_connected(a) and nx.is_connected(c)


def test_random_default_p_edge_density() -> None:
    counts = [build("random", 30, seed=s).number_of_edges() for s in range(10)]
    pairs = 30 * 29 / 2
    assert abs(np.mean(counts) / pairs - 0.7) < 0.03  # 4350 pair draws: sd of the density ~0.007


def test_random_redraws_until_connected() -> None:
    # find a seed whose first draw is disconnected; with more tries the same seed must still give a connected graph
    redrawn = []
    for seed in range(40):
        try:
            build("random", 20, seed, p=0.12, max_tries=1)
        except TopologyError:
            g = build("random", 20, seed, p=0.12, max_tries=200)
            assert nx.is_connected(g) and sorted(g.nodes) == list(range(20))
            redrawn.append(seed)
    assert redrawn  # p = 0.12 on 20 nodes is disconnected most of the time


def test_random_impossible_raises() -> None:
    with pytest.raises(TopologyError, match="disconnected in all 1 draws"):
        build("random", 30, 0, p=1e-6, max_tries=1)
    with pytest.raises(TopologyError, match="p must be in"):
        build("random", 5, p=1.5)
    with pytest.raises(TopologyError, match="max_tries"):
        build("random", 5, max_tries=0)


# --- files ----------------------------------------------------------------------------------------------------

RING5 = {(0, 1), (1, 2), (2, 3), (3, 4), (0, 4)}


def ring5_matrix() -> np.ndarray:
    a = np.zeros((5, 5), dtype=int)
    for u, v in RING5:
        a[u, v] = a[v, u] = 1
    return a


def test_file_edge_list(tmp_path: Path) -> None:
    f = tmp_path / "ring.txt"
    f.write_text("# a ring\n0 1\n1 2  # inline comment\n\n2 3\n3 4\n4 0\n")
    assert edge_set(build("file", 5, path=f)) == RING5
    assert edge_set(build("file", 5, path=str(f))) == RING5


def test_file_adjacency_text_and_npy(tmp_path: Path) -> None:
    a = ring5_matrix()
    (tmp_path / "a.csv").write_text("\n".join(",".join(map(str, row)) for row in a))
    (tmp_path / "a.txt").write_text("# adjacency\n" + "\n".join(" ".join(map(str, row)) for row in a))
    np.save(tmp_path / "a.npy", a.astype(float))
    for name in ("a.csv", "a.txt", "a.npy"):
        assert edge_set(build("file", 5, path=tmp_path / name)) == RING5, name


def test_file_graphml(tmp_path: Path) -> None:
    g = nx.Graph(sorted(RING5))
    nx.write_graphml(g, tmp_path / "plain.graphml")
    nx.write_graphml(nx.relabel_nodes(g, {v: f"n{v}" for v in g}), tmp_path / "prefixed.graphml")
    for name in ("plain.graphml", "prefixed.graphml"):
        built = build("file", 5, path=tmp_path / name)
        assert edge_set(built) == RING5 and sorted(built.nodes) == list(range(5))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("0 1\n1 5\n", "outside 0..4"),
        ("0 1\n1 1\n1 2\n2 3\n3 4\n", "self-loop"),
        ("0 1\n1 2\n3 4\n", "disconnected"),
        ("0 1\n1 x\n", "line 2"),
        ("0 1 2 3\n1 2\n", "line 1: expected 'i j'"),
    ],
)
def test_file_errors(tmp_path: Path, text: str, match: str) -> None:
    f = tmp_path / "bad.txt"
    f.write_text(text)
    with pytest.raises(TopologyError, match=match):
        build("file", 5, path=f)


def test_file_missing_or_bad_matrix(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="needs path"):
        build("file", 5)
    with pytest.raises(TopologyError, match="does not exist"):
        build("file", 5, path=tmp_path / "nope.txt")
    a = ring5_matrix()
    a[0, 2] = 1
    np.save(tmp_path / "asym.npy", a)
    with pytest.raises(TopologyError, match="not symmetric"):
        build("file", 5, path=tmp_path / "asym.npy")
    np.save(tmp_path / "rect.npy", np.ones((2, 3)))
    with pytest.raises(TopologyError, match="square"):
        build("file", 5, path=tmp_path / "rect.npy")
    big = np.zeros((6, 6))
    big[0, 1:] = big[1:, 0] = 1
    np.save(tmp_path / "big.npy", big)
    with pytest.raises(TopologyError, match="outside 0..4"):
        build("file", 5, path=tmp_path / "big.npy")


# --- mixing matrices ------------------------------------------------------------------------------------------

GRAPHS = [("star", 7), ("cycle", 8), ("binary-tree", 12), ("complete", 5), ("random", 15), ("torus", 12), ("grid", 12)]


def brute_force(g: nx.Graph, kind: str) -> np.ndarray:
    """SPEC §1 entry by entry."""
    k, deg = g.number_of_nodes(), dict(g.degree)
    dmax = max(deg.values())
    w = np.zeros((k, k))
    for i in range(k):
        for j in g.neighbors(i):
            w[i, j] = {"metropolis": 1 / (1 + max(deg[i], deg[j])), "uniform": 1 / (deg[i] + 1),
                       "max-degree": 1 / (1 + dmax)}[kind]
        w[i, i] = 1 / (deg[i] + 1) if kind == "uniform" else 1 - w[i].sum()
    return w


@pytest.mark.parametrize("kind", ["metropolis", "uniform", "max-degree"])
@pytest.mark.parametrize(("name", "n"), GRAPHS)
def test_mixing_matches_definition(name: str, n: int, kind: str) -> None:
    g = build(name, n, seed=1, **({"p": 0.3} if name == "random" else {}))
    w = mixing_matrix(g, kind)
    assert w.dtype == np.float64 and w.shape == (n, n)
    np.testing.assert_allclose(w, brute_force(g, kind), atol=1e-14)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-12)
    assert (w >= 0).all() and (np.diag(w) > 0).all()
    a = nx.to_numpy_array(g, nodelist=range(n)) + np.eye(n)
    assert ((w > 0) <= (a > 0)).all()  # support inside the closed neighbourhood
    stats = statistics(g, w)
    if kind in ("metropolis", "max-degree"):
        assert stats["symmetric"] and stats["doubly_stochastic"]
        np.testing.assert_allclose(stats["consensus_share"], 1 / n, atol=1e-10)


def test_uniform_is_row_stochastic_only_and_biased() -> None:
    g = build("star", 20)
    w = mixing_matrix(g, "uniform")
    stats = statistics(g, w)
    assert not stats["symmetric"] and not stats["doubly_stochastic"]
    assert stats["consensus_share"][0] == pytest.approx(0.345, abs=1e-3)
    # uniform weights are a random walk with self-loops: the stationary share is (deg+1) / sum(deg+1)
    for name, n in GRAPHS:
        g = build(name, n, seed=1, **({"p": 0.3} if name == "random" else {}))
        deg = np.array([g.degree[i] for i in range(n)], dtype=float)
        share = statistics(g, mixing_matrix(g, "uniform"))["consensus_share"]
        np.testing.assert_allclose(share, (deg + 1) / (deg + 1).sum(), atol=1e-10)


def test_complete_uniform_is_fedavg() -> None:
    np.testing.assert_allclose(mixing_matrix(build("complete", 6), "uniform"), np.full((6, 6), 1 / 6))


def test_mixing_kind_spelling_and_errors() -> None:
    g = build("cycle", 5)
    np.testing.assert_array_equal(mixing_matrix(g, "max_degree"), mixing_matrix(g, "max-degree"))
    np.testing.assert_array_equal(mixing_matrix(g), mixing_matrix(g, "metropolis"))
    with pytest.raises(TopologyError, match="known: metropolis, uniform, max-degree"):
        mixing_matrix(g, "laplacian")
    with pytest.raises(TopologyError, match="nodes 0..2"):
        mixing_matrix(nx.relabel_nodes(nx.path_graph(3), {0: 5}))


# --- statistics -----------------------------------------------------------------------------------------------

REFERENCE = [  # frameworks.md §4, n = 20: (topology, mixing, max share, |lambda2|)
    ("star", "uniform", 0.345, 0.500),
    ("star", "metropolis", 0.050, 0.950),
    ("cycle", "uniform", 0.050, 0.967),
    ("cycle", "metropolis", 0.050, 0.967),
    ("binary-tree", "uniform", 0.069, 0.975),
    ("binary-tree", "metropolis", 0.050, 0.983),
]


@pytest.mark.parametrize(("name", "kind", "share", "lam2"), REFERENCE)
def test_reference_spectra(name: str, kind: str, share: float, lam2: float) -> None:
    g = build(name, 20)
    stats = statistics(g, mixing_matrix(g, kind))
    assert stats["max_share"] == pytest.approx(share, abs=1e-3)
    assert stats["lambda2"] == pytest.approx(lam2, abs=1e-3)
    assert stats["spectral_gap"] == pytest.approx(1 - stats["lambda2"])


def test_star_closed_forms() -> None:
    for n in (3, 10, 20, 50):
        g = build("star", n)
        uni, met = statistics(g, mixing_matrix(g, "uniform")), statistics(g, mixing_matrix(g, "metropolis"))
        assert uni["max_share"] == pytest.approx(n / (3 * n - 2), abs=1e-12)  # (deg_hub+1)/sum(deg+1)
        assert uni["lambda2"] == pytest.approx(0.5, abs=1e-12)
        assert met["lambda2"] == pytest.approx(1 - 1 / n, abs=1e-12)


@pytest.mark.parametrize("n", [4, 5, 8, 20, 31])
def test_cycle_statistics_closed_form(n: int) -> None:
    g = build("cycle", n)
    stats = statistics(g, mixing_matrix(g, "metropolis"))
    lam2 = 1 / 3 + 2 / 3 * np.cos(2 * np.pi / n)
    assert stats["lambda2"] == pytest.approx(lam2, abs=1e-10)
    assert stats["spectral_gap"] == pytest.approx(1 - lam2, abs=1e-10)
    assert stats["diameter"] == n // 2
    assert (stats["degree_min"], stats["degree_mean"], stats["degree_max"]) == (2, 2.0, 2)
    assert (stats["n_nodes"], stats["n_edges"]) == (n, n)
    assert stats["max_share"] == pytest.approx(1 / n) and len(stats["consensus_share"]) == n
    assert sum(stats["consensus_share"]) == pytest.approx(1.0)


def test_tree_statistics() -> None:
    g = build("binary-tree", 15)  # a full tree of depth 3
    stats = statistics(g, mixing_matrix(g))
    assert stats["diameter"] == 6 and (stats["degree_min"], stats["degree_max"]) == (1, 3)
    assert stats["degree_mean"] == pytest.approx(2 * 14 / 15)


@pytest.mark.parametrize("kind", ["metropolis", "uniform"])
@pytest.mark.parametrize(("name", "n"), GRAPHS)
def test_spectral_statistics_match_brute_force_eigendecomposition(name: str, n: int, kind: str) -> None:
    """|λ2| is the second largest |eigenvalue| of W and the shares the eigenvector of W^T for eigenvalue 1."""
    g = build(name, n, seed=1, **({"p": 0.3} if name == "random" else {}))
    w = mixing_matrix(g, kind)
    stats = statistics(g, w)
    vals, vecs = np.linalg.eig(w.T)
    moduli = np.sort(np.abs(vals))
    assert stats["lambda2"] == pytest.approx(moduli[-2], abs=1e-10)
    assert stats["spectral_gap"] == pytest.approx(1 - moduli[-2], abs=1e-10)
    perron = np.real(vecs[:, np.argmin(np.abs(vals - 1.0))])
    np.testing.assert_allclose(stats["consensus_share"], perron / perron.sum(), atol=1e-10)
    assert stats["max_share"] == pytest.approx((perron / perron.sum()).max(), abs=1e-10)


def test_describe_is_json_ready() -> None:
    g = build("random", 10, seed=2, p=0.4)
    w = mixing_matrix(g, "uniform")
    record = json.loads(json.dumps(describe(g, w)))
    assert record["edges"] == sorted([min(e), max(e)] for e in g.edges)
    assert all(i < j for i, j in record["edges"])
    np.testing.assert_array_equal(mixing_of(record), w)
    assert record["stats"] == json.loads(json.dumps(statistics(g, w)))
    assert set(record["stats"]) >= {"spectral_gap", "lambda2", "diameter", "degree_min", "degree_mean",
                                    "degree_max", "consensus_share", "max_share", "n_nodes", "n_edges",
                                    "doubly_stochastic", "symmetric"}


# --- drawing and the command line -----------------------------------------------------------------------------

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_draw_writes_png(tmp_path: Path) -> None:
    g = build("star", 6)
    out = topologies.draw(g, mixing_matrix(g, "uniform"), tmp_path / "sub" / "star.png")
    assert out.read_bytes()[:8] == PNG_MAGIC


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, "-m", "topologies", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_cli_prints_table_and_draws(tmp_path: Path) -> None:
    out = tmp_path / "cycle.png"
    res = run_cli("cycle", "-n", "20", "--mixing", "uniform", "--out", str(out), cwd=ROOT)
    assert res.returncode == 0, res.stderr
    lam2 = 1 / 3 + 2 / 3 * np.cos(2 * np.pi / 20)
    assert "spectral gap" in res.stdout and f"{lam2:.4f}" in res.stdout and f"{1 - lam2:.4f}" in res.stdout
    assert out.read_bytes()[:8] == PNG_MAGIC
    res = run_cli("random", "-n", "8", "--p", "0.5", "--seed", "3", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "random-8.png").read_bytes()[:8] == PNG_MAGIC


def test_cli_graph_file_and_errors(tmp_path: Path) -> None:
    f = tmp_path / "ring.txt"
    f.write_text("0 1\n1 2\n2 3\n3 0\n")
    res = run_cli("file", "-n", "4", "--graph-file", str(f), "--out", str(tmp_path / "f.png"), cwd=ROOT)
    assert res.returncode == 0, res.stderr
    res = run_cli("moebius", "-n", "4", cwd=tmp_path)
    assert res.returncode == 2 and "unknown topology 'moebius'" in res.stderr
