"""--gossip choco (CHOCO-SGD, SPEC §8, p2pfl.gossip.choco) against this file's references: dense, with public copies
equal to the models, a CHOCO round is X⁺ = W_γ(X − ηG), W_γ = (1 − γ)I + γW; compressed, on networks that fail
and change, it is CHOCO whose neighbours always hold the sender's current public copy (numpy, one x̂ per peer), which
the implementation's per-link replays and resets must reproduce. CHOCO-gossip keeps the network mean and converges
for every codec; the learners' dense choco is plain gossip; a run resumes exactly."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from test_decentralised_optimisers import LR, SEED, _errors, _job, _problem, _ring, _same_trace, _x_star

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
@pytest.mark.numerics
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


@pytest.mark.parametrize("extra, what", [(("--topology", "one-peer-exponential"), "one-way"),
                                         (("--consensus-step", "0"), "--consensus-step"),
                                         (("--algorithm", "dec-featarc"), "--gossip")])
def test_choco_refusals_are_one_line(runs_dir: Path, extra: tuple[str, ...], what: str) -> None:
    args = ["-m", "p2pfl.run", "--algorithm", "quadratic", "--peers", "8", "--rounds", "2", "--gossip", "choco",
            "--out", str(runs_dir), "--no-progress", "--no-plots", *extra]
    proc = run_job(args, ranks=0)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and what in lines[0], proc.stderr


# ------------------------------------------------------------------ failing and changing networks

FD, FRHO, FROUNDS = 40, 0.1, 60  # k = 4 of 40 float64: a message of 48 bytes, a log of 6, replays up to 5


def _random_k(p: int, t: int, v: np.ndarray) -> np.ndarray:
    """Random-k of SPEC §8 from the stream (seed, peer, round, "compress"), written here: k = ⌈ρd⌉ coordinates."""
    from p2pfl.seeding import numpy_rng
    k = math.ceil(FRHO * len(v) - 1e-9)
    keep = numpy_rng(SEED, p, f"compress/{t}").choice(len(v), size=k, replace=False, shuffle=False)
    out = np.zeros_like(v)
    out[keep] = v[keep]
    return out


def _ideal_choco(nets: list, rounds: int, gamma: float) -> np.ndarray:
    """CHOCO with one public copy per peer that every neighbour holds (what per-link copies kept equal amount to):
    active peers step, compress x½ − x̂, add it to x̂ and mix over the round's network; others keep everything."""
    from p2pfl.seeding import numpy_rng
    a = np.array([(i + 1) / math.sqrt(K) for i in range(K)])
    b = np.stack([numpy_rng(SEED, i, "quadratic").standard_normal(FD) / (i + 1) for i in range(K)])
    xs = (a[:, None] * b).sum(0) / (a ** 2).sum()
    X, H = np.ones((K, FD)), np.zeros((K, FD))
    errors = [np.mean((X - xs) ** 2)]
    for t in range(1, rounds + 1):
        net = nets[t]
        active = sorted(net.active)
        half = {i: X[i] - LR * a[i] * (a[i] * X[i] - b[i]) for i in active}
        for i in active:
            H[i] = H[i] + _random_k(i, t, half[i] - H[i])
        for i in active:
            W = net.W.toarray()
            X[i] = (half[i] - H[i]) + gamma * sum(W[i, j] * H[j] for j in active if W[i, j] != 0) \
                + (1 - gamma) * H[i]
        errors.append(np.mean((X[sorted(net.alive)] - xs) ** 2))  # the run's error is over the alive peers
    return np.array(errors)


@pytest.mark.parametrize("options", [{"topology": "cycle", "link_failure": 0.3, "participation": 0.6},
                                     {"topology": "random", "p": 0.5, "resample": True},
                                     {"topology": "cycle", "churn": 0.2, "crash": "3@20"}])
def test_choco_on_failing_networks_is_choco_with_current_copies(runs_dir: Path, options: dict) -> None:
    """Links failing, peers sitting out, churning or crashing, a graph resampled every round: the trace equals the
    ideal CHOCO's over the networks the round records name (to 1e-12 relative), so each link's copies were brought
    level whenever it carried a message; some links came back by a replay (a round's bytes above its message count)
    and, on the resampled graph, by a dense reset."""
    from test_schemes_dynamic_networks import _networks
    flags = [f"--{k.replace('_', '-')}={v}" if v is not True else f"--{k}" for k, v in options.items()]
    run = _job(runs_dir, "run", "--gossip", "choco", "--compress", "random-k", "--compress-ratio", str(FRHO),
               "--consensus-step", str(GAMMA), "--dim", str(FD), *flags, rounds=FROUNDS)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    records = [r for r in records if r["type"] == "round"]
    nets = _networks({k: v for k, v in options.items()}, records)
    _same_trace(np.array([r["error"] for r in records]), _ideal_choco(nets, FROUNDS, GAMMA))
    message = 16 + 8 * math.ceil(FRHO * FD - 1e-9)
    sizes = {v for r in records[1:] for v in r["bytes_sent_per_peer"].values()}
    assert any(v % message for v in sizes), sizes  # a bundle (replay or reset) travelled


# ------------------------------------------------------------------ CHOCO-gossip: the mean kept, geometric convergence

#: γ per codec (too large a γ for the codec and graph diverges, as CHOCO theory says): sign's δ = ‖v‖₁²/(d‖v‖²)
#: falls as the differences it sends thin out, so it needs a smaller step.
CODEC_GAMMA = {"none": 0.3, "top-k": 0.3, "random-k": 0.2, "qsgd": 0.3, "sign": 0.05}
CK, CD, CROUNDS = 8, 50, 300


def _gossip(runs_dir: Path, name: str, codec: str, *network: str) -> list[dict]:
    proc = run_job(["-m", "p2pfl.run", "--algorithm", "consensus", "--peers", str(CK), "--rounds", str(CROUNDS),
                    "--vector-size", str(CD), "--vector-dtype", "float64", "--gossip", "choco", "--compress", codec,
                    "--compress-ratio", "0.2", "--consensus-step", str(CODEC_GAMMA[codec]), *network,
                    "--eval-every", "100", "--out", str(runs_dir), "--name", name, "--no-progress", "--no-plots"],
                   ranks=0)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [r["metrics"] for r in map(json.loads, (runs_dir / name / "metrics.jsonl").read_text().splitlines())
            if r["type"] == "eval"]


@pytest.mark.parametrize("codec", list(CODEC_GAMMA))
@pytest.mark.parametrize("network", [("--topology", "cycle"), ("--topology", "random", "--p", "0.4"),
                                     ("--topology", "cycle", "--link-failure", "0.2"),
                                     ("--topology", "random", "--p", "0.4", "--link-failure", "0.2")],
                         ids=["cycle", "random", "cycle-failing", "random-failing"])
@pytest.mark.numerics
def test_choco_gossip_keeps_the_mean_and_converges_geometrically(runs_dir: Path, codec: str,
                                                                 network: tuple[str, ...]) -> None:
    """Doubly stochastic Metropolis weights (recomputed on the surviving links, symmetric still): the network mean
    moves only by float64 rounding (< 1e-13 relative after 300 rounds; equal copies make the gossip step sum to
    zero), and the distance to it shrinks by a steady factor, at least 1/0.75 in every 100 rounds (measured: 1.5x
    to 1000x; a stalling run, sign at γ = 0.3 on the cycle, shrank 1.15x)."""
    evals = _gossip(runs_dir, f"run-{codec}", codec, *network)
    assert len(evals) == CROUNDS // 100
    assert all(e["mean_shift"] < 1e-13 for e in evals), [e["mean_shift"] for e in evals]
    distance = [e["distance_to_mean_peer_max"] for e in evals]
    assert all(later < 0.75 * earlier for earlier, later in zip(distance, distance[1:])), distance


# ------------------------------------------------------------------ the learners, and resuming

def _learner(runs_dir: Path, name: str, *extra: str) -> list[dict]:
    proc = run_job(["-m", "p2pfl.run", "--algorithm", "fedavg", "--dataset", "synthetic", "--peers", "4",
                    "--rounds", "4", "--topology", "cycle", "--eval-every", "2", "--out", str(runs_dir), "--name", name,
                    "--no-progress", "--no-plots", *extra], ranks=0)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in (runs_dir / name / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.endswith("_s")} for r in lines if r["type"] in ("round", "eval")]


def test_learner_choco_without_compression_is_plain_gossip(runs_dir: Path) -> None:
    """fedavg under --gossip choco with the dense codec and γ = 1, links failing: every record (losses, consensus
    distance, accuracies, bytes) equals --gossip average's bit for bit."""
    plain = _learner(runs_dir, "average", "--link-failure", "0.3")
    choco = _learner(runs_dir, "choco", "--link-failure", "0.3", "--gossip", "choco")
    assert choco == plain and len(plain) >= 6


def test_learner_choco_compressed_sends_its_codec_and_learns_on(runs_dir: Path) -> None:
    """fedavg under CHOCO with top-k at ρ = 0.01: each peer sends its two neighbours the top-k message of its
    model's difference (the manifest's size) in a round where no link fails, and the losses stay finite."""
    records = _learner(runs_dir, "topk", "--gossip", "choco", "--compress", "top-k", "--compress-ratio", "0.01",
                       "--consensus-step", "0.5")
    manifest = json.loads((runs_dir / "topk" / "manifest.json").read_text())
    size = manifest["compression"]["message_bytes"]
    rounds = [r for r in records if r["type"] == "round" and r["round"] > 0]
    assert all(r["bytes_sent_per_peer"] == {str(p): 2 * size for p in range(4)} for r in rounds)
    assert all(math.isfinite(r["loss_mean"]) for r in rounds)


def test_choco_resumes_exactly(runs_dir: Path) -> None:
    """CHOCO-gossip with random-k under link failures keeps x̂, its copies, what each neighbour holds and its log
    in the peers' scheme state, checkpointed: stopped after round 3 and resumed, the records equal an
    uninterrupted run's bit for bit."""
    base = ["-m", "p2pfl.run", "--algorithm", "consensus", "--peers", str(K), "--vector-size", "50", "--vector-dtype",
            "float64", "--topology", "cycle", "--link-failure", "0.4", "--gossip", "choco", "--compress", "random-k",
            "--compress-ratio", "0.1", "--consensus-step", "0.4", "--eval-every", "1", "--checkpoint-every", "1",
            "--no-progress", "--no-plots"]
    from test_schemes_dynamic_networks import resumed_and_uninterrupted
    full, resumed = resumed_and_uninterrupted(runs_dir, base, rounds=8, stop=3)
    numbers = [[(r.get("metrics"), r.get("consensus_distance"), r.get("bytes_sent_per_peer")) for r in run]
               for run in (full, resumed)]
    assert numbers[1] == numbers[0] and len(numbers[0]) >= 16
