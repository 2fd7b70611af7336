"""topologies.stats and topologies.measures above DENSE_MAX (issue 29): the sparse path, forced on a few hundred
peers by lowering the thresholds, against the exact dense values; the sparse manifest record and its reader; the
manifest written one entry at a time; a 10,000-peer description."""
from __future__ import annotations

import json
import time
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

import topologies
from p2pfl.config import make_config
from p2pfl.runtime import runfolder
from p2pfl.runtime.runfolder import RunFolder
from topologies import measures, stats

#: (topology, K, params, mixing): symmetric Metropolis weights and one-way uniform ones.
CASES = [("cycle", 200, {}, "metropolis"), ("random", 200, {"p": 0.05}, "metropolis"),
         ("star", 150, {}, "metropolis"), ("binary-tree", 127, {}, "metropolis"), ("chain", 120, {}, "max-degree"),
         ("random", 200, {"p": 0.05}, "uniform"), ("star", 150, {}, "uniform"), ("binary-tree", 63, {}, "uniform")]
#: Graphs on which the double sweep is exact: trees and vertex-transitive graphs.
SWEEP_EXACT = {"cycle", "star", "binary-tree", "chain"}


def _case(name: str, k: int, params: dict, mixing: str) -> tuple[nx.Graph, np.ndarray]:
    graph = topologies.build(name, k, seed=3, **params)
    return graph, topologies.mixing_matrix(graph, mixing)


@pytest.fixture
def sparse_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every K above 8 takes the sparse path, and its diameter is the double-sweep bound."""
    monkeypatch.setattr(measures, "DENSE_MAX", 8)
    monkeypatch.setattr(stats, "DIAMETER_EXACT_MAX", 8)


@pytest.mark.parametrize("name,k,params,mixing", CASES)
def test_sparse_statistics_equal_the_dense_ones(name, k, params, mixing, monkeypatch):
    graph, w = _case(name, k, params, mixing)
    dense = stats.statistics(graph, w)
    assert dense["estimated"] == []
    monkeypatch.setattr(measures, "DENSE_MAX", 8)
    monkeypatch.setattr(stats, "DIAMETER_EXACT_MAX", 8)
    for given in (sp.csr_matrix(w), w):  # a sparse W, and a dense one above DENSE_MAX
        got = stats.statistics(graph, given)
        for key in ("lambda2", "spectral_gap", "p", "p_worst"):
            assert got[key] == pytest.approx(dense[key], abs=1e-8), key
        np.testing.assert_allclose(got["consensus_share"], dense["consensus_share"], rtol=0, atol=1e-9)
        assert got["max_share"] == pytest.approx(dense["max_share"], abs=1e-9)
        for key in ("symmetric", "doubly_stochastic", "n_nodes", "n_edges", "degree_min", "degree_max"):
            assert got[key] == dense[key], key
        assert got["diameter"] <= dense["diameter"]
        if name in SWEEP_EXACT:
            assert got["diameter"] == dense["diameter"]
        assert any(note.startswith("diameter: lower bound") for note in got["estimated"])
        assert (got["n_eff"] is None) == (dense["n_eff"] is None) == (not dense["symmetric"])
        assert any(note.startswith("n_eff:") for note in got["estimated"]) == dense["symmetric"]


@pytest.mark.parametrize("name,k,params,mixing", CASES[:4])
def test_exact_sparse_diameter_equals_networkx(name, k, params, mixing, monkeypatch):
    graph, _ = _case(name, k, params, mixing)
    monkeypatch.setattr(measures, "DENSE_MAX", 8)
    monkeypatch.setattr(stats, "BFS_BLOCK", 16)
    assert stats.diameter(graph) == (nx.diameter(graph), None)


def _half_ring(k: int, lazy: float) -> np.ndarray:
    """A ring whose peers keep `lazy` and split the rest between their two neighbours (at 0, even K: λ_K = −1)."""
    ring = nx.to_numpy_array(nx.cycle_graph(k))
    return lazy * np.eye(k) + (1 - lazy) / 2 * ring


@pytest.mark.parametrize("w", [_case("cycle", 300, {}, "metropolis")[1], _case("chain", 200, {}, "metropolis")[1],
                               _case("binary-tree", 255, {}, "metropolis")[1],
                               _case("random", 200, {"p": 0.05}, "metropolis")[1],
                               _half_ring(200, 0.01), _half_ring(200, 0.0)])
def test_shift_invert_gives_the_dense_lambda2(w, monkeypatch):
    """The fallback for a stalled Lanczos, also where |λ_K| beats λ2 (a periodic ring: |λ_K| = 1)."""
    dense = stats.second_eigenvalue_modulus(w)
    assert measures._shift_invert_radius(sp.csr_matrix(w)) == pytest.approx(dense, abs=1e-8)
    monkeypatch.setattr(measures, "DENSE_MAX", 8)
    monkeypatch.setattr(measures, "LANCZOS_RESTARTS", 1)  # Lanczos may now stop short: the fallback answers
    assert stats.second_eigenvalue_modulus(sp.csr_matrix(w)) == pytest.approx(dense, abs=1e-8)


@pytest.mark.parametrize("exact_max", [8, 100])
def test_a_disconnected_graph_raises_as_networkx_does(exact_max, monkeypatch):
    monkeypatch.setattr(measures, "DENSE_MAX", 8)
    monkeypatch.setattr(stats, "DIAMETER_EXACT_MAX", exact_max)  # the double sweep, then BFS from every node
    graph = nx.disjoint_union(nx.cycle_graph(10), nx.cycle_graph(10))
    with pytest.raises(nx.NetworkXError):
        stats.diameter(graph)


def _n_eff_spread(w: np.ndarray, gamma: float, probes: int) -> tuple[float, float]:
    """The exact n_eff and the standard deviation of its Hutchinson estimate (delta method): Rademacher probes on
    1⊥ estimate trace(PΣP) with variance 2(‖PΣP‖_F² − Σ_i (PΣP)_ii²)/probes."""
    k = len(w)
    lam, q = np.linalg.eigh(w)
    sigma = (q * (lam ** 2 / (1 - gamma * lam ** 2))) @ q.T
    centred = np.eye(k) - 1.0 / k
    b = centred @ sigma @ centred
    trace = float(np.trace(sigma))
    sd_trace = np.sqrt(2 * ((b ** 2).sum() - (np.diag(b) ** 2).sum()) / probes)
    exact = k / ((1 - gamma) * trace)
    return exact, exact * sd_trace / trace


@pytest.mark.parametrize("name,k,params", [("cycle", 200, {}), ("random", 200, {"p": 0.05}), ("star", 150, {}),
                                           ("binary-tree", 127, {})])
def test_n_eff_estimate_is_within_its_spread(name, k, params, sparse_path):
    graph, w = _case(name, k, params, "metropolis")
    exact, spread = _n_eff_spread(w, measures.N_EFF_GAMMA, measures.N_EFF_PROBES)
    estimate, relative_error = measures.n_eff_estimate(sp.csr_matrix(w))
    assert measures.n_eff(sp.csr_matrix(w)) == estimate
    assert abs(estimate - exact) <= 4 * spread
    assert relative_error < 0.1
    many, _ = measures.n_eff_estimate(sp.csr_matrix(w), probes=2000, seed=5)  # it converges to the exact value
    assert abs(many - exact) <= 4 * spread * np.sqrt(measures.N_EFF_PROBES / 2000)


@pytest.mark.parametrize("mixing", ["metropolis", "uniform"])
def test_the_other_measures_take_a_sparse_w(mixing, monkeypatch):
    _, w = _case("random", 60, {"p": 0.1}, mixing)
    x = np.random.default_rng(0).standard_normal((60, 3))
    dense = measures.expected_contraction(w), measures.contraction(w, x), measures.p_worst(w)
    monkeypatch.setattr(measures, "DENSE_MAX", 8)
    csr = sp.csr_matrix(w)
    got = measures.expected_contraction(csr), measures.contraction(csr, x), measures.p_worst(csr)
    np.testing.assert_allclose(got, dense, rtol=1e-10, atol=1e-10)


def test_symmetry_and_stochasticity_checks_are_the_dense_ones():
    _, w = _case("random", 40, {"p": 0.2}, "metropolis")
    for tweak in (0.0, 1e-10, 1e-6):
        v = w.copy()
        v[0, 1] += tweak
        assert measures.is_symmetric(sp.csr_matrix(v)) == bool(np.allclose(v, v.T, atol=measures.TOL))
        assert stats.doubly_stochastic(sp.csr_matrix(v)) == stats.doubly_stochastic(v)


def test_describe_never_densifies_a_sparse_w(sparse_path, monkeypatch):
    graph, w = _case("random", 200, {"p": 0.05}, "metropolis")
    csr = sp.csr_matrix(w)

    def refuse(*args, **kwargs):
        raise AssertionError("W densified")

    monkeypatch.setattr(sp.csr_matrix, "toarray", refuse)
    monkeypatch.setattr(sp.csr_matrix, "todense", refuse)
    record = stats.describe(graph, csr)
    assert record["stats"]["n_nodes"] == 200


@pytest.mark.parametrize("mixing", ["metropolis", "uniform"])
def test_the_sparse_record_reads_back_to_w_exactly(mixing):
    graph, w = _case("random", 30, {"p": 0.2}, mixing)
    for given in (w, sp.csr_matrix(w)):
        record = json.loads(json.dumps(topologies.describe(graph, given)))
        assert record["weights"] == [[i, j, w[i, j]] for i, j in zip(*np.nonzero(w))]  # row-major, diagonal in
        assert "mixing" not in record
        np.testing.assert_array_equal(topologies.mixing_of(record), w)
        back = topologies.sparse_mixing_of(record)
        assert sp.issparse(back) and back.shape == w.shape
        np.testing.assert_array_equal(back.toarray(), w)
    del record["stats"]  # K from the largest index when a record has no stats
    np.testing.assert_array_equal(topologies.mixing_of(record), w)


def test_an_old_dense_record_still_reads():
    graph, w = _case("cycle", 6, {}, "metropolis")
    old = {"edges": [list(e) for e in sorted(graph.edges)], "mixing": w.tolist(),
           "stats": {k: v for k, v in stats.statistics(graph, w).items() if k != "estimated"}}
    np.testing.assert_array_equal(topologies.mixing_of(old), w)
    np.testing.assert_array_equal(topologies.sparse_mixing_of(old).toarray(), w)
    from analysis.study import topology_measures
    assert topology_measures(old)["spectral_gap"] == pytest.approx(1 - 2 / 3)


def _folder(tmp_path: Path) -> RunFolder:
    return RunFolder(tmp_path / "run", make_config(algorithm="consensus", out=str(tmp_path)))


def test_the_manifest_is_the_dict_and_small_entries_keep_their_layout(tmp_path):
    folder = _folder(tmp_path)
    path = folder.path / "manifest.json"
    folder.update_manifest(a=1, b={"c": [1, 2.5], "d": {}}, e=np.float64(0.5))
    folder.update_manifest(b={"c": "x"}, f=[], g=None)
    assert json.loads(path.read_text()) == folder.manifest == {"a": 1, "b": {"c": "x"}, "e": 0.5, "f": [], "g": None}
    assert path.read_text() == json.dumps(folder.manifest, indent=2) + "\n"  # what write_json wrote before


@pytest.mark.parametrize("compact_over", [runfolder.COMPACT_OVER, 100])
def test_a_large_entry_is_encoded_once(tmp_path, monkeypatch, compact_over):
    """Its encodings all happen in the update that gives it (one compact, plus the indented one when it is
    short); the later updates reuse them. Past COMPACT_OVER it is one line."""
    monkeypatch.setattr(runfolder, "COMPACT_OVER", compact_over)
    graph, w = _case("random", 120, {"p": 0.1}, "metropolis")
    big = topologies.describe(graph, w)
    calls = []
    real = json.dumps

    def counting(value, *args, **kwargs):
        calls.append(value is big)
        return real(value, *args, **kwargs)

    monkeypatch.setattr(runfolder.json, "dumps", counting)
    folder = _folder(tmp_path)
    folder.update_manifest(topology=big, seeds={"seed": 0})
    first = sum(calls)
    for i in range(8):
        folder.update_manifest(**{f"entry{i}": {"i": i}})
    monkeypatch.setattr(runfolder.json, "dumps", real)
    long = len(json.dumps(big)) > compact_over
    assert first == sum(calls) == (1 if long else 2)
    text = (folder.path / "manifest.json").read_text()
    assert (text.splitlines()[1].startswith('  "topology": {"edges": [[')) == long
    assert json.loads(text) == json.loads(json.dumps(folder.manifest))
    assert list(json.loads(text)) == ["topology", "seeds"] + [f"entry{i}" for i in range(8)]


def _metropolis(graph: nx.Graph) -> sp.csr_matrix:
    """Sparse Metropolis weights (topologies.mixing's rule), built in O(E)."""
    k = graph.number_of_nodes()
    edges = np.array(graph.edges, dtype=np.int64)
    deg = np.bincount(edges.ravel(), minlength=k).astype(np.float64)
    rows, cols = np.concatenate([edges[:, 0], edges[:, 1]]), np.concatenate([edges[:, 1], edges[:, 0]])
    off = sp.csr_matrix((1.0 / (1.0 + np.maximum(deg[rows], deg[cols])), (rows, cols)), shape=(k, k))
    return (off + sp.diags(1.0 - np.asarray(off.sum(axis=1)).ravel())).tocsr()


def test_ten_thousand_peers_are_described(capsys):
    """A random graph on 10,000 peers, mean degree about 10 (its largest component); the time is printed, not
    asserted."""
    g = nx.fast_gnp_random_graph(10_000, 0.001, seed=1)
    graph = nx.convert_node_labels_to_integers(g.subgraph(max(nx.connected_components(g), key=len)))
    w = _metropolis(graph)
    start = time.perf_counter()
    record = topologies.describe(graph, w)
    seconds = time.perf_counter() - start
    with capsys.disabled():
        print(f"\ndescribe() at K={graph.number_of_nodes()}: {seconds:.2f} s")
    s = record["stats"]
    assert s["n_nodes"] == graph.number_of_nodes() and s["symmetric"] and s["doubly_stochastic"]
    assert 0 < s["lambda2"] < 1 and s["p"] == pytest.approx(1 - s["lambda2"] ** 2)
    assert s["consensus_share"] == [1 / s["n_nodes"]] * s["n_nodes"]
    assert len(s["estimated"]) == 2 and 1 < s["n_eff"] < s["n_nodes"]
    assert len(record["weights"]) == w.nnz
