"""The example codec and aggregator plug-ins (examples/plugins/codec.py, aggregator.py), each against its definition
written here: the quantised top-k's decoded vector and exact message bytes, alone and in a run's records; the
geometric median's Weiszfeld steps by a brute force in numpy, its optimality against scipy, and its defence in a
run with sign-flip attackers next to the plain mean's."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from p2pfl import plugins
from p2pfl.byzantine import AGGREGATORS, Robust, aggregate
from p2pfl.config import ConfigError, make_config
from p2pfl.gossip.compress import CODECS, make
from p2pfl.run import main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "plugins"
HEADER = 16  # a compressed message's int64 d and dtype code


@pytest.fixture(scope="module", autouse=True)
def loaded() -> None:
    plugins.load([str(EXAMPLES / "codec.py"), str(EXAMPLES / "aggregator.py")])


# --- the codec: top-k with b-bit values


def quantised_top_k(v: np.ndarray, k: int, b: int) -> np.ndarray:
    """The definition: v's k largest magnitudes (a full sort), rounded to the nearest multiple of s = max|kept|/L,
    L = 2^(b-1) - 1, zero elsewhere."""
    keep = np.argsort(-np.abs(v), kind="stable")[:k]
    levels = 2 ** (b - 1) - 1
    scale = np.abs(v[keep]).max() / levels
    out = np.zeros_like(v)
    out[keep] = np.clip(np.rint(v[keep] / scale), -levels, levels) * scale
    return out


@pytest.mark.parametrize("d, ratio, b", [(1000, 0.1, 4), (333, 0.05, 8), (50, 1.0, 2), (7, 0.3, 3)])
def test_quantised_top_k_decodes_to_its_definition_in_its_exact_bytes(d: int, ratio: float, b: int) -> None:
    codec = make(make_config(algorithm="consensus", compress="quantised-top-k", compress_ratio=ratio, qtopk_bits=b))
    v = torch.randn(d, dtype=torch.float64, generator=torch.Generator().manual_seed(d))
    payload = codec.encode(3, v, 7)
    got = codec.decode(3, payload, 7)
    k = math.ceil(ratio * d)
    assert got.dtype == torch.float64 and int((got != 0).sum()) <= k
    np.testing.assert_allclose(got.numpy(), quantised_top_k(v.numpy(), k, b), rtol=1e-12, atol=1e-15)
    message = HEADER + 8 + math.ceil(k * max(1, (d - 1).bit_length()) / 8) + math.ceil(k * b / 8)
    assert payload.dtype == torch.uint8 and payload.numel() == message == codec.size(d, torch.float64)


def test_quantised_top_k_sends_a_nonfinite_vector_nonfinite() -> None:
    codec = make(make_config(algorithm="consensus", compress="quantised-top-k"))
    v = torch.randn(100)
    v[5] = float("nan")
    assert not torch.isfinite(codec.decode(0, codec.encode(0, v, 0), 0)).all()


def test_quantised_top_k_options_are_flags_with_their_ranges() -> None:
    assert "quantised-top-k" in CODECS
    for bad in (1, 9):
        with pytest.raises(ConfigError, match=r"^--qtopk-bits: must lie in \[2, 8\]"):
            make_config(algorithm="consensus", compress="quantised-top-k", qtopk_bits=bad)
    with pytest.raises(ConfigError, match="^--compress: scaffold does not mix by the W-weighted gossip"):
        make_config(algorithm="scaffold", compress="quantised-top-k")


def test_a_run_sends_and_records_the_plug_in_s_messages(tmp_path: Path) -> None:
    """Consensus on a cycle of 4 (each peer sends to its 2 neighbours a round), d = 1000 float32, ρ = 0.1, b = 4:
    16 + 4 + ⌈100·10/8⌉ + ⌈100·4/8⌉ = 195 bytes a message."""
    flags = (EXAMPLES / "codec.flags").read_text().split()
    assert main([*flags, "--out", str(tmp_path), "--name", "codec", "--no-progress", "--no-plots"]) == 0
    message = HEADER + 4 + math.ceil(100 * 10 / 8) + math.ceil(100 * 4 / 8)
    lines = [json.loads(line) for line in (tmp_path / "codec" / "metrics.jsonl").read_text().splitlines()]
    rounds = [r for r in lines if r["type"] == "round" and r["round"] > 0]
    assert len(rounds) == 3
    assert all(r["bytes_sent_per_peer"] == {str(p): 2 * message for p in range(4)} for r in rounds)
    entry = json.loads((tmp_path / "codec" / "manifest.json").read_text())["compression"]
    assert entry["codec"] == "quantised-top-k" and entry["value_bits"] == 4 and entry["kept"] == 100
    assert entry["message_bytes"] == message and entry["dense_bytes"] == 4000


# --- the aggregator: the geometric median by Weiszfeld's steps


def weiszfeld(points: np.ndarray, steps: int) -> np.ndarray:
    """Weiszfeld's iteration written out: from the mean, y <- Σ x_j/‖x_j − y‖ / Σ 1/‖x_j − y‖."""
    y = points.mean(axis=0)
    for _ in range(steps):
        w = 1.0 / np.maximum(np.linalg.norm(points - y, axis=1), 1e-12)
        y = (w[:, None] * points).sum(axis=0) / w.sum()
    return y


def _neighbourhood(n: int = 7, d: int = 30) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    gen = torch.Generator().manual_seed(n * d)
    own = torch.randn(d, generator=gen, dtype=torch.float64)
    received = {j: torch.randn(d, generator=gen, dtype=torch.float64) + (50.0 if j == 2 else 0.0)
                for j in range(1, n)}
    return own, received


def _robust(steps: int, cut: float = 0.0) -> Robust:
    return Robust(frozenset(), aggregator="geometric-median", options={"weiszfeld_steps": steps, "weiszfeld_cut": cut})


@pytest.mark.parametrize("steps", [1, 3, 10])
def test_geometric_median_is_weiszfeld_s_iteration(steps: int) -> None:
    own, received = _neighbourhood()
    got, cut = aggregate(_robust(steps), 0, own, received, [])
    points = np.stack([own.numpy(), *(received[j].numpy() for j in sorted(received))])
    np.testing.assert_allclose(got.numpy(), weiszfeld(points, steps), rtol=1e-10, atol=1e-12)
    assert cut == []


def test_geometric_median_minimises_the_sum_of_distances_and_ignores_an_outlier() -> None:
    own, received = _neighbourhood()
    points = np.stack([own.numpy(), *(received[j].numpy() for j in sorted(received))])
    total = lambda y: float(np.linalg.norm(points - y, axis=1).sum())  # noqa: E731
    best = minimize(total, points.mean(axis=0), method="Powell", options={"xtol": 1e-10, "ftol": 1e-12,
                                                                          "maxiter": 200_000})
    got, cut = aggregate(_robust(200, cut=3.0), 0, own, received, [])
    assert total(got.numpy()) <= best.fun * (1 + 1e-6)
    assert np.linalg.norm(got.numpy() - best.x) < 1e-2 * np.linalg.norm(best.x)
    assert cut == [2]  # the outlier, 50 away in every coordinate
    honest = np.delete(points, 2, axis=0).mean(axis=0)
    assert np.linalg.norm(got.numpy() - honest) < 0.1 * np.linalg.norm(points[2] - honest)


def test_geometric_median_options_and_registration() -> None:
    assert "geometric-median" in AGGREGATORS
    assert "linear" not in AGGREGATORS.get("geometric-median").capabilities  # a robust rule, not the plain mean
    cfg = make_config(algorithm="consensus", aggregator="geometric-median", weiszfeld_steps=3)
    assert Robust.from_config(cfg, frozenset(), 4).options == {"weiszfeld_steps": 3, "weiszfeld_cut": 0.0}
    with pytest.raises(ConfigError, match="^--weiszfeld-steps: must be >= 1"):
        make_config(algorithm="consensus", aggregator="geometric-median", weiszfeld_steps=0)
    with pytest.raises(ConfigError, match="^--weiszfeld-cut: cuts beyond the median distance"):
        make_config(algorithm="consensus", aggregator="geometric-median", weiszfeld_cut=0.5)


def _honest_distance(tmp_path: Path, aggregator: str) -> float:
    flags = (EXAMPLES / "aggregator.flags").read_text().split()
    flags[flags.index("--aggregator") + 1] = aggregator
    args = [*flags, "--attack-scale", "10", "--rounds", "6", "--vector-dtype", "float64", "--out", str(tmp_path),
            "--name", aggregator, "--no-progress", "--no-plots"]
    assert main(args) == 0
    final = json.loads((tmp_path / aggregator / "metrics.jsonl").read_text().splitlines()[-1])
    return final["metrics"]["distance_to_initial_mean_peer_max"]


def test_a_run_with_attackers_keeps_the_honest_peers_where_the_mean_does_not(tmp_path: Path) -> None:
    """One sign-flip attacker at scale 10 among 5 peers on the complete graph: the mean drags the honest peers far
    from their starting average; the geometric median keeps them within a fraction of that."""
    dragged = _honest_distance(tmp_path, "mean")
    kept = _honest_distance(tmp_path, "geometric-median")
    assert kept < 0.2 * dragged
