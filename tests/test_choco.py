"""--gossip choco (CHOCO-SGD, SPEC §8, p2pfl.gossip.choco) on the quadratic problem, against this file's dense
reference: with public copies equal to the models, a CHOCO round is X⁺ = W_γ(X − ηG), W_γ = (1 − γ)I + γW."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from test_decentralised_optimisers import LR, _errors, _job, _problem, _ring, _same_trace, _x_star

from conftest import run_job

K, D, GAMMA, ROUNDS = 8, 5, 0.3, 300


def _lazy_gossip(gamma: float, rounds: int) -> np.ndarray:
    """The error trace of X⁺ = W_γ(X − ηG) on the ring of K (x₀ = 1, ζ² = 1), round 0 first."""
    a, b = _problem(1.0, K)
    W = (1 - gamma) * np.eye(K) + gamma * _ring(K)
    xs, X = _x_star(a, b), np.ones((K, D))
    errors = [np.mean((X - xs) ** 2)]
    for _ in range(rounds):
        X = W @ (X - LR * a[:, None] * (a[:, None] * X - b))
        errors.append(np.mean((X - xs) ** 2))
    return np.array(errors)


def _choco(runs_dir: Path, name: str, *extra: str, rounds: int = ROUNDS) -> Path:
    return _job(runs_dir, name, "--topology", "cycle", "--gossip", "choco", *extra, rounds=rounds)


def test_choco_without_compression_and_gamma_1_is_plain_gossip_bit_for_bit(runs_dir: Path) -> None:
    plain = _errors(_job(runs_dir, "average", "--topology", "cycle", rounds=60))
    choco = _errors(_choco(runs_dir, "choco", rounds=60))
    assert choco.tolist() == plain.tolist()


def test_choco_without_compression_is_lazy_gossip(runs_dir: Path) -> None:
    _same_trace(_errors(_choco(runs_dir, "lazy", "--consensus-step", str(GAMMA), rounds=60)), _lazy_gossip(GAMMA, 60))


@pytest.mark.parametrize("codec", [("top-k", "--compress-ratio", "0.4"), ("random-k", "--compress-ratio", "0.4"),
                                   ("qsgd",), ("sign",)])
def test_choco_with_each_codec_reaches_the_dense_fixed_point(runs_dir: Path, codec: tuple[str, ...]) -> None:
    """Error feedback: the copies catch up with the models, so every codec ends where dense CHOCO does (to 1e-6,
    against a fixed-point error near 1e-2), while its early rounds differ (the messages are compressed)."""
    got = _errors(_choco(runs_dir, codec[0], "--compress", *codec, "--consensus-step", str(GAMMA)))
    want = _lazy_gossip(GAMMA, ROUNDS)
    assert abs(got[-1] - want[-1]) <= 1e-6 * want[-1]
    assert abs(got[3] - want[3]) > 1e-6 * want[3]


def test_choco_sends_the_encoded_difference(runs_dir: Path) -> None:
    """top-k at ρ = 0.4 of d = 5 float64: k = 2 values, 2 indices of 3 bits, the 16-byte header, to 2 neighbours."""
    run = _choco(runs_dir, "bytes", "--compress", "top-k", "--compress-ratio", "0.4", rounds=3)
    rounds = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    sent = [r["bytes_sent_per_peer"] for r in rounds if r["type"] == "round" and r["round"] > 0]
    assert sent == [{str(p): 2 * (16 + 8 * 2 + math.ceil(2 * 3 / 8)) for p in range(K)}] * 3


@pytest.mark.parametrize("extra, what", [(("--link-failure", "0.1"), "fixed network"),
                                         (("--topology", "random-matching"), "fixed undirected network"),
                                         (("--consensus-step", "0"), "--consensus-step"),
                                         (("--algorithm", "dec-sl"), "--gossip")])
def test_choco_refusals_are_one_line(runs_dir: Path, extra: tuple[str, ...], what: str) -> None:
    args = ["-m", "p2pfl.run", "--algorithm", "quadratic", "--peers", "8", "--rounds", "2", "--gossip", "choco",
            "--out", str(runs_dir), "--no-progress", "--no-plots", *extra]
    proc = run_job(args, ranks=0)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and what in lines[0], proc.stderr
