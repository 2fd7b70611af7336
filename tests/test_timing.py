"""The network model of simulated time (p2pfl.network.timing, SPEC §9) against closed forms written here: a
constant compute time with free links, a cycle and a star with latency a, upload U and message size S (the hub
sharing its upload and its download), stragglers, and the seeded log-normal spread and trace files."""
from __future__ import annotations

import math
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from p2pfl.network.timing import NetworkModel, bandwidths, compute_times, latencies
from p2pfl.seeding import numpy_rng


def _links(graph: nx.Graph, size: int) -> dict[tuple[int, int], int]:
    """Every edge both ways, `size` bytes each: one gossip exchange."""
    return {**{(i, j): size for i, j in graph.edges}, **{(j, i): size for i, j in graph.edges}}


def _model(k: int, c: float = 0.0, a: float = 0.0, up: float = 0.0, down: float = 0.0) -> NetworkModel:
    return NetworkModel(compute_times(k, 0, c), latencies(k, a), bandwidths(k, up), bandwidths(k, down))


def test_constant_compute_free_links_cost_steps_times_c() -> None:
    """T rounds of E steps at c seconds a step, zero latency, unlimited bandwidth: T·E·c, every peer busy."""
    k, c, steps, rounds = 8, 0.25, 3, 7
    model = _model(k, c)
    links = _links(nx.cycle_graph(k), 10_000)
    total = sum(model.round_time(dict.fromkeys(range(k), steps), links).duration for _ in range(rounds))
    assert total == pytest.approx(rounds * steps * c, rel=1e-15)
    one = model.round_time(dict.fromkeys(range(k), steps), links)
    assert one.idle == dict.fromkeys(range(k), 0.0) and one.transfer == dict.fromkeys(range(k), 0.0)


def test_cycle_round_is_compute_plus_latency_plus_two_shared_uploads() -> None:
    """On a cycle each peer sends its S bytes to 2 neighbours over its upload U (U/2 each) and receives 2 over an
    unlimited download: E·c + a + 2S/U."""
    k, c, a, up, size, steps = 6, 0.1, 0.02, 1e6, 250_000, 2
    model = _model(k, c, a, up)
    got = model.round_time(dict.fromkeys(range(k), steps), _links(nx.cycle_graph(k), size))
    assert got.duration == pytest.approx(steps * c + a + 2 * size / up, rel=1e-12)


@pytest.mark.parametrize("down", [0.0, 2e6])
def test_star_hub_shares_its_upload_and_download(down: float) -> None:
    """A star of K: the hub's K − 1 sends share U (a + S(K − 1)/U each); each leaf's one send to the hub meets the
    hub's download shared K − 1 ways (a + S / min(U, D/(K − 1))). Every peer's slowest transfer involves the hub,
    so the round is E·c + the larger of the two."""
    k, c, a, up, size = 5, 0.05, 0.01, 1e6, 100_000
    model = _model(k, c, a, up, down)
    hub_send = a + size * (k - 1) / up
    leaf_send = a + size / min(up, (down or math.inf) / (k - 1))
    got = model.round_time(dict.fromkeys(range(k), 1), _links(nx.star_graph(k - 1), size))
    assert got.transfer[0] == pytest.approx(max(hub_send, leaf_send), rel=1e-12)
    assert got.duration == pytest.approx(c + max(hub_send, leaf_send), rel=1e-12)
    assert got.transfer[1] == pytest.approx(max(hub_send, leaf_send), rel=1e-12)


def test_straggler_factor_multiplies_its_compute_and_others_wait() -> None:
    """Two peers 10x slower: their compute is 10·E·c, the round lasts that long, the others idle the difference."""
    k, c, steps = 8, 0.2, 4
    model = NetworkModel(compute_times(k, 0, c, slow=(2, 5), factor=10.0), latencies(k), bandwidths(k), bandwidths(k))
    got = model.round_time(dict.fromkeys(range(k), steps), _links(nx.cycle_graph(k), 1000))
    assert got.compute[2] == got.compute[5] == pytest.approx(10 * steps * c)
    assert got.duration == pytest.approx(10 * steps * c)
    assert got.idle[0] == pytest.approx(9 * steps * c) and got.idle[2] == 0.0


def test_partial_steps_and_absent_peers() -> None:
    """A straggler doing half its steps computes half as long; a peer not in the round costs nothing."""
    model = _model(4, 1.0)
    got = model.round_time({0: 2, 1: 1.0, 3: 2}, {(0, 1): 10, (1, 0): 10})
    assert got.compute == {0: 2.0, 1: 1.0, 3: 2.0} and 2 not in got.idle and got.duration == 2.0


def test_lognormal_spread_is_the_seeded_stream_and_traces_load(tmp_path: Path) -> None:
    """c_i = c·exp(σ z_i), z_i from (seed, i, "compute-time"): a function of the seed and the peer only; a CSV or
    text trace gives the peers' times in order; a trace of the wrong length is refused."""
    k, c, sigma, seed = 6, 0.3, 0.5, 11
    want = [c * math.exp(sigma * numpy_rng(seed, p, "compute-time").standard_normal()) for p in range(k)]
    np.testing.assert_allclose(compute_times(k, seed, c, sigma), want, rtol=1e-15)
    assert not np.array_equal(compute_times(k, seed, c, sigma), compute_times(k, seed + 1, c, sigma))
    trace = tmp_path / "speeds.csv"
    trace.write_text("\n".join(str(0.1 * (p + 1)) for p in range(k)) + "\n")
    np.testing.assert_allclose(compute_times(k, seed, c, trace=trace), [0.1 * (p + 1) for p in range(k)])
    with pytest.raises(ValueError, match="6 times for 7 peers"):
        compute_times(k + 1, seed, c, trace=trace)


def test_latency_matrix_file_and_bad_models(tmp_path: Path) -> None:
    """A K × K latency file gives each link its own a_ij; shapes, negative or NaN values and zero bandwidths are
    refused in one line."""
    k = 3
    matrix = np.arange(k * k, dtype=float).reshape(k, k) / 100
    np.save(tmp_path / "lat.npy", matrix)
    model = NetworkModel(compute_times(k, 0, 0.0), latencies(k, matrix=tmp_path / "lat.npy"), bandwidths(k),
                         bandwidths(k))
    assert model.transfers({(0, 2): 5, (2, 1): 5}) == {(0, 2): 0.02, (2, 1): 0.07}
    with pytest.raises(ValueError, match="shape"):
        latencies(k + 1, matrix=tmp_path / "lat.npy")
    with pytest.raises(ValueError, match="non-negative"):
        NetworkModel(np.array([-1.0, 1, 1]), latencies(k), bandwidths(k), bandwidths(k))
    with pytest.raises(ValueError, match="positive"):
        NetworkModel(np.ones(k), latencies(k), np.zeros(k), bandwidths(k))
