"""The compressors of compressed gossip (SPEC §8, p2pfl.gossip.compress), each against its definition written here:
what decode(encode(v)) is, where its randomness comes from, its contraction and the exact size of its message."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import get_type_hints

import pytest
import torch
from test_records import problems

from p2pfl.config import ConfigError, make_config
from p2pfl.gossip.codec import Codec
from p2pfl.gossip.compress import CODECS, bits, make
from p2pfl.gossip.compress.qsgd import QSGD
from p2pfl.gossip.compress.randomk import RandomK
from p2pfl.gossip.compress.records import CompressedManifest, Compression
from p2pfl.gossip.compress.sign import Sign
from p2pfl.gossip.compress.topk import TopK

from conftest import run_job

HEADER = 16  # int64 d and the dtype code
F32 = 4  # bytes of a float32


def roundtrip(codec: Codec, v: torch.Tensor, peer: int = 3, round: int = 7) -> torch.Tensor:
    """What a receiver reads of `peer`'s vector `v` in `round`, decoded by a second instance of the codec (another
    rank holds no state of the sender's)."""
    payload = codec.encode(peer, v, round)
    assert payload.dtype == torch.uint8 and payload.dim() == 1
    return codec.decode(peer, payload, round)


def payload_bytes(codec: Codec, v: torch.Tensor) -> int:
    payload = codec.encode(0, v, 0)
    return payload.numel() * payload.element_size()


# --- bit packing


@pytest.mark.parametrize("width", [1, 2, 3, 4, 5, 7, 8, 9, 17, 24])
@pytest.mark.parametrize("n", [0, 1, 7, 8, 13, 1000])
def test_bits_round_trip_in_exactly_ceil_n_width_over_8_bytes(width: int, n: int) -> None:
    codes = torch.randint(0, 2 ** width, (n,), generator=torch.Generator().manual_seed(n * 31 + width))
    packed = bits.pack(codes, width)
    assert packed.dtype == torch.uint8 and packed.numel() == math.ceil(n * width / 8)
    assert torch.equal(bits.unpack(packed, n, width).to(torch.int64), codes)


def test_bits_are_least_significant_first_without_padding_between_codes() -> None:
    assert bits.pack(torch.tensor([1, 0, 1]), 1).tolist() == [0b101]
    assert bits.pack(torch.tensor([1, 2]), 4).tolist() == [1 | 2 << 4]
    assert bits.pack(torch.tensor([5, 6, 7]), 3).tolist() == [5 | 6 << 3 | (7 & 3) << 6, 7 >> 2]


# --- top-k


def top_k_definition(v: torch.Tensor, k: int) -> torch.Tensor:
    """v on the k coordinates of largest |v_l| (found by a full sort), zero elsewhere."""
    keep = torch.argsort(v.abs(), descending=True)[:k]
    out = torch.zeros_like(v)
    out[keep] = v[keep]
    return out


@pytest.mark.parametrize("d, ratio, k", [(1000, 0.1, 100), (300, 0.01, 3), (100, 0.015, 2), (50, 1.0, 50),
                                         (7, 0.01, 1)])
def test_top_k_keeps_exactly_the_k_largest_magnitudes(d: int, ratio: float, k: int) -> None:
    v = torch.randn(d, dtype=torch.float64, generator=torch.Generator().manual_seed(d))
    got = roundtrip(TopK(ratio), v)
    assert int((got != 0).sum()) == k  # k = ⌈ρ·d⌉ (randn has no zeros)
    assert torch.equal(got, top_k_definition(v, k))


def test_top_k_ties_keep_k_coordinates_of_the_largest_magnitudes() -> None:
    """Ties at the k-th magnitude: which of the equal coordinates is kept is torch.topk's choice; the kept
    magnitudes are the k largest as a multiset and the kept values are the vector's own."""
    v = torch.tensor([1.0, -3.0, 2.0, -2.0, 2.0, 0.5, 3.0, -2.0])
    got = roundtrip(TopK(0.5), v)  # k = 4: both 3s and two of the four 2s
    kept = got != 0
    assert int(kept.sum()) == 4 and torch.equal(got[kept], v[kept])
    assert sorted(got.abs()[kept].tolist()) == [2.0, 2.0, 3.0, 3.0]


def test_top_k_message_is_k_values_and_k_packed_indices_under_2_percent_at_rho_001() -> None:
    for d in (100_000, 11_200_000):
        k, index_bits = math.ceil(0.01 * d), math.ceil(math.log2(d))
        exact = HEADER + F32 * k + math.ceil(k * index_bits / 8)
        assert TopK(0.01).size(d, torch.float32) == exact
        assert exact <= 0.02 * F32 * d
    v = torch.randn(100_000)
    assert payload_bytes(TopK(0.01), v) == TopK(0.01).size(100_000, torch.float32)


# --- random-k


def support(v: torch.Tensor) -> list[int]:
    return torch.nonzero(v).flatten().tolist()


def test_random_k_sends_v_unscaled_on_k_coordinates_drawn_from_the_stream() -> None:
    d, k = 400, 40
    v = torch.randn(d, dtype=torch.float64) + 10.0  # no zeros: the support is the drawn coordinates
    w = torch.randn(d, dtype=torch.float64) - 10.0
    codec = RandomK(0.1, seed=5)
    got = roundtrip(codec, v, peer=2, round=9)
    assert len(support(got)) == k and torch.equal(got[got != 0], v[got != 0])  # the values, not rescaled by d/k
    # a function of the stream (seed, peer, round): not of the vector, nor of the codec instance
    assert support(roundtrip(RandomK(0.1, seed=5), w, peer=2, round=9)) == support(got)
    assert torch.equal(RandomK(0.1, seed=5).decode(2, codec.encode(2, v, 9), 9), got)  # the receiver draws them too
    assert support(roundtrip(codec, v, peer=2, round=10)) != support(got)
    assert support(roundtrip(codec, v, peer=3, round=9)) != support(got)
    assert support(roundtrip(RandomK(0.1, seed=6), v, peer=2, round=9)) != support(got)


def test_random_k_draws_every_coordinate_with_probability_k_over_d() -> None:
    """Over many rounds each coordinate is sent with frequency k/d, so E‖Q(v) − v‖² = (1 − k/d)‖v‖² (δ = k/d).
    2000 rounds: the frequency's standard error is √(p(1 − p)/2000) < 0.0097; 5 of them bound every coordinate."""
    d, rounds, codec = 20, 2000, RandomK(0.25, seed=1)
    counts = torch.zeros(d)
    for t in range(rounds):
        counts[codec.coordinates(4, t, d)] += 1
    assert counts.sum() == rounds * 5
    assert (counts / rounds - 0.25).abs().max() < 5 * math.sqrt(0.25 * 0.75 / rounds)


def test_random_k_message_is_its_values_alone_and_nonfinite_vectors_stay_nonfinite() -> None:
    v = torch.randn(10_000)
    assert payload_bytes(RandomK(0.01, seed=0), v) == HEADER + F32 * 100
    v[0] = float("nan")
    assert not torch.isfinite(roundtrip(RandomK(0.01, seed=0), v)).all()


# --- QSGD


def qsgd_expectations(v: torch.Tensor, s: int) -> tuple[torch.Tensor, float]:
    """The definition: U(v)_l = ‖v‖/s · sign(v_l) · ξ_l, ξ_l = ⌊s|v_l|/‖v‖⌋ + Bernoulli(remainder), so E U = v;
    Q = U/τ. Returns E U and E‖Q(v) − v‖² = E‖U‖²/τ² − 2‖v‖²/τ + ‖v‖², computed exactly."""
    norm, d = float(v.norm()), v.numel()
    tau = 1 + min(d / s ** 2, math.sqrt(d) / s)
    r = s * v.abs() / norm
    floor, p = r.floor(), r - r.floor()
    mean_u = norm / s * torch.sign(v) * (floor + p)
    second = (norm / s) ** 2 * float((floor ** 2 + p * (2 * floor + 1)).sum())
    return mean_u, second / tau ** 2 - 2 * norm ** 2 / tau + norm ** 2


def qsgd_tau(d: int, s: int) -> float:
    return 1 + min(d / s ** 2, math.sqrt(d) / s)


@pytest.mark.parametrize("d, s", [(50, 4), (12, 8)])
def test_qsgd_is_unbiased_before_its_rescaling(d: int, s: int) -> None:
    """Mean of τ·Q(v) over N rounds (each its own stream) against v. Each coordinate of τQ is ‖v‖/s times a level
    that takes one of two neighbouring values, so its standard deviation is at most ‖v‖/(2s) and that of the mean
    ‖v‖/(2s√N); 5 of them bound all coordinates (a rounding to the nearest level, biased by up to ‖v‖/(2s), fails)."""
    v = torch.randn(d, dtype=torch.float64, generator=torch.Generator().manual_seed(d))
    codec, n = QSGD(s, seed=2), 1000
    total = torch.zeros(d, dtype=torch.float64)
    for t in range(n):
        total += roundtrip(codec, v, peer=1, round=t)
    mean = total / n * qsgd_tau(d, s)
    tolerance = 5 * float(v.norm()) / (2 * s * math.sqrt(n))
    torch.testing.assert_close(qsgd_expectations(v, s)[0], v, rtol=0, atol=1e-12)  # the definition's mean is v
    assert float((mean - v).abs().max()) < tolerance
    nearest = v.norm() / s * torch.sign(v) * (s * v.abs() / v.norm()).round()  # what the test must tell apart
    assert float((nearest - v).abs().max()) > tolerance


def test_qsgd_sends_levels_of_the_norm_with_sign() -> None:
    d, s = 200, 4
    v = torch.randn(d, dtype=torch.float64)
    level = roundtrip(QSGD(s, seed=0), v) * qsgd_tau(d, s) * s / float(v.norm())
    assert torch.allclose(level, level.round(), atol=1e-9) and float(level.abs().max()) <= s
    assert bool(((torch.sign(level) == torch.sign(v)) | (level == 0)).all())
    # each coordinate's level is one of the two around s|v_l|/‖v‖
    r = s * v.abs() / v.norm()
    step = (level.abs() - r.floor()).round()
    assert bool(((step == 0) | (step == 1)).all())


@pytest.mark.parametrize("d, s", [(10, 1), (10, 4), (100, 4), (1000, 2), (64, 16)])
def test_qsgd_contraction_bound_holds_on_random_vectors(d: int, s: int) -> None:
    """E‖Q(v) − v‖² ≤ (1 − δ)‖v‖², δ = 1/τ: exactly by the definition's expectation, and the codec's empirical
    mean error over 200 rounds agrees with that expectation within 5 standard errors."""
    gen = torch.Generator().manual_seed(d * s)
    for trial in range(3):
        v = torch.randn(d, dtype=torch.float64, generator=gen) * (1 + 10 * trial)
        if trial == 2:
            v[: d // 2] = 0.0  # sparse vectors too
        _, expected = qsgd_expectations(v, s)
        bound = (1 - 1 / qsgd_tau(d, s)) * float(v.norm()) ** 2
        assert expected <= bound * (1 + 1e-12)
        errors = torch.tensor([float((roundtrip(QSGD(s, seed=trial), v, round=t) - v).norm()) ** 2
                               for t in range(200)], dtype=torch.float64)
        assert abs(float(errors.mean()) - expected) <= 5 * float(errors.std()) / math.sqrt(200) + 1e-12


def test_qsgd_rounding_comes_from_the_stream() -> None:
    v = torch.randn(300)
    a = roundtrip(QSGD(4, seed=1), v, peer=2, round=3)
    assert torch.equal(roundtrip(QSGD(4, seed=1), v, peer=2, round=3), a)
    assert not torch.equal(roundtrip(QSGD(4, seed=1), v, peer=2, round=4), a)
    assert not torch.equal(roundtrip(QSGD(4, seed=1), v, peer=5, round=3), a)


def test_qsgd_message_is_a_norm_and_level_and_sign_bits() -> None:
    """s = 4: ⌈log2 5⌉ = 3 level bits and a sign bit, 4 bits a coordinate: 1/8 of float32 plus norm and header."""
    d = 100_000
    assert payload_bytes(QSGD(4, seed=0), torch.randn(d)) == HEADER + F32 + d * 4 // 8
    assert payload_bytes(QSGD(7, seed=0), torch.randn(d)) == HEADER + F32 + d * 4 // 8
    assert payload_bytes(QSGD(8, seed=0), torch.randn(d)) == HEADER + F32 + math.ceil(d * 5 / 8)
    assert payload_bytes(QSGD(1, seed=0), torch.randn(9)) == HEADER + F32 + math.ceil(9 * 2 / 8)


def test_qsgd_zero_and_nonfinite_vectors() -> None:
    assert torch.equal(roundtrip(QSGD(4, seed=0), torch.zeros(10)), torch.zeros(10))
    v = torch.randn(10)
    v[3] = float("inf")
    assert not torch.isfinite(roundtrip(QSGD(4, seed=0), v)).any()


# --- scaled sign


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sign_is_the_l1_mean_times_the_signs(dtype: torch.dtype) -> None:
    v = torch.randn(1001, dtype=dtype)
    want = v.abs().sum() / v.numel() * torch.sign(v)
    got = roundtrip(Sign(), v)
    assert got.dtype == dtype
    torch.testing.assert_close(got, want, rtol=1e-6 if dtype == torch.float32 else 1e-13, atol=0)


def test_sign_sends_zero_as_plus_scale_and_keeps_its_error() -> None:
    """d bits cannot say 0: a zero decodes as +‖v‖₁/d, and ‖v − Q(v)‖² = ‖v‖² − ‖v‖₁²/d still."""
    v = torch.tensor([0.0, -2.0, 1.0, 0.0], dtype=torch.float64)
    got = roundtrip(Sign(), v)
    assert got.tolist() == [0.75, -0.75, 0.75, 0.75]
    assert float((got - v).norm() ** 2) == pytest.approx(float(v.norm() ** 2 - v.abs().sum() ** 2 / 4))


def test_sign_message_is_a_scale_and_d_bits() -> None:
    for d in (8, 9, 100_000):
        assert payload_bytes(Sign(), torch.randn(d)) == HEADER + F32 + math.ceil(d / 8)
    assert payload_bytes(Sign(), torch.randn(100, dtype=torch.float64)) == HEADER + 8 + 13


# --- every codec


@pytest.mark.parametrize("name", [n for n in CODECS.names() if n != "none"])
def test_every_codec_decodes_to_a_dense_vector_of_the_senders_dtype_and_exact_size(name: str) -> None:
    codec = make(make_config(algorithm="consensus", compress=name, compress_ratio=0.05, qsgd_levels=4, seed=0))
    for dtype in (torch.float32, torch.float64):
        v = torch.randn(333, dtype=dtype)
        got = roundtrip(codec, v)
        assert got.shape == (333,) and got.dtype == dtype
        assert payload_bytes(codec, v) == codec.size(333, dtype)
        # contractive on this vector too (top-k and sign deterministically; random-k and qsgd on average)
        assert float((got - v).norm()) < 2 * float(v.norm())


def test_none_is_the_identity_and_names_are_closed() -> None:
    v = torch.randn(5)
    assert make(make_config(compress="none")).encode(0, v, 0) is v
    with pytest.raises(ValueError, match="--compress: unknown value 'zip'"):
        make(make_config(compress="zip"))


@pytest.mark.parametrize("values, message", [
    ({"compress": "zip"}, "--compress: unknown value 'zip'"),
    ({"compress_ratio": 0}, "--compress-ratio: must lie in (0, 1]"),
    ({"compress_ratio": 1.5}, "--compress-ratio: must lie in (0, 1]"),
    ({"qsgd_levels": 0}, "--qsgd-levels: must be >= 1"),
    ({"compress": "top-k", "gossip": "d2", "algorithm": "quadratic"},
     "--compress: compresses --gossip average (no error feedback) and choco"),
    ({"compress": "sign", "algorithm": "scaffold"}, "--compress: scaffold does not mix by the W-weighted gossip"),
    ({"compress": "top-k", "algorithm": "local"}, "--compress: local does not mix by the W-weighted gossip"),
    ({"compress": "qsgd", "byzantine": "1"}, "--compress: compresses the plain W-weighted mean"),
])
def test_bad_compression_options_end_in_one_line(values: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        make_config(**values)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


# --- in a run (--gossip average: compressed messages, no error feedback)


def _rounds(run_dir: Path) -> list[dict]:
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in lines if r["type"] == "round" and r["round"] > 0]


def _consensus(runs_dir: Path, name: str, *extra: str) -> Path:
    args = ["-m", "p2pfl.run", "--algorithm", "consensus", "--peers", "6", "--rounds", "2", "--topology", "cycle",
            "--vector-size", "20000", "--out", str(runs_dir), "--name", name, "--no-progress", "--no-plots", *extra]
    proc = run_job(args, ranks=0)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return runs_dir / name


def test_bytes_sent_are_the_encoded_messages(runs_dir: Path) -> None:
    """Each peer of the cycle sends its top-k message (ρ = 0.01 of 20000 float32) to its two neighbours a round."""
    rounds = _rounds(_consensus(runs_dir, "top-k", "--compress", "top-k", "--compress-ratio", "0.01"))
    message = HEADER + F32 * 200 + math.ceil(200 * 15 / 8)
    assert all(r["bytes_sent_per_peer"] == {str(p): 2 * message for p in range(6)} for r in rounds)
    dense = _consensus(runs_dir, "dense")
    assert all(r["bytes_sent_per_peer"] == {str(p): 2 * F32 * 20000 for p in range(6)} for r in _rounds(dense))
    assert "compression" not in _manifest(dense)


def _manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def test_the_manifest_records_the_codec_and_its_exact_message_bytes(runs_dir: Path) -> None:
    """top-k at ρ = 0.01 of d = 3000 float32: k = 30 values and 30 indices of ⌈log2 3000⌉ = 12 bits (45 bytes)."""
    d, k = 3000, 30
    message = HEADER + F32 * k + math.ceil(k * math.ceil(math.log2(d)) / 8)
    manifest = _manifest(_consensus(runs_dir, "top-k", "--compress", "top-k", "--compress-ratio", "0.01",
                                    "--vector-size", str(d)))
    assert problems(manifest, CompressedManifest, "manifest") == []
    entry = manifest["compression"]
    assert set(entry) == set(get_type_hints(Compression))
    assert entry == {"codec": "top-k", "ratio": 0.01, "kept": k, "qsgd_levels": None, "consensus_step": None,
                     "d": d, "dtype": "float32", "message_bytes": message, "dense_bytes": F32 * d,
                     "bytes_ratio": message / (F32 * d), "scope": "vector", "segments": 1}
    assert message == 181 == TopK(0.01).size(d, torch.float32)


def test_the_manifest_records_choco_s_step_and_qsgd_s_levels(runs_dir: Path) -> None:
    """qsgd with s = 4 on the quadratic's d = 300 float64: one scale and 300 codes of ⌈log2 5⌉ + 1 = 4 bits."""
    d = 300
    args = ["-m", "p2pfl.run", "--algorithm", "quadratic", "--peers", "4", "--rounds", "1", "--topology", "cycle",
            "--dim", str(d), "--gossip", "choco", "--consensus-step", "0.25", "--compress", "qsgd",
            "--qsgd-levels", "4", "--out", str(runs_dir), "--name", "qsgd", "--no-progress", "--no-plots"]
    proc = run_job(args, ranks=0)
    assert proc.returncode == 0, proc.stderr[-3000:]
    entry = _manifest(runs_dir / "qsgd")["compression"]
    message = HEADER + 8 + math.ceil(d * (math.ceil(math.log2(4 + 1)) + 1) / 8)
    assert entry == {"codec": "qsgd", "ratio": None, "kept": None, "qsgd_levels": 4, "consensus_step": 0.25,
                     "d": d, "dtype": "float64", "message_bytes": message, "dense_bytes": 8 * d,
                     "bytes_ratio": message / (8 * d), "scope": "vector", "segments": 1}


def test_a_poisoned_compressed_message_is_rejected(runs_dir: Path) -> None:
    rounds = _rounds(_consensus(runs_dir, "nan", "--compress", "random-k", "--fault", "nan@2:1"))
    assert rounds[0]["rejected"] == [[1, 2], [3, 2]] and math.isfinite(rounds[-1]["consensus_distance"])
