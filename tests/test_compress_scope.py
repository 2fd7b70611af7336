"""--compress-scope tensor (p2pfl.gossip.compress.base): each tensor of the mixed vector compressed on its own, as
ChocoSGD does, against this file's references: per-tensor top-k is numpy's per-segment top-k, sign per tensor is
each segment's ‖v_i‖₁/d_i times its signs, qsgd sends levels of each segment's own norm and τ(d_i), and every codec
(a plug-in's too) per tensor is the vector codec applied to each segment alone with that segment's stream. The
bytes are a hand count and what the transport counted in a run; vector scope (the default) is today's message;
CHOCO's replays and resets keep the copies level under tensor scope."""
from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

from p2pfl.gossip.compress import message
from p2pfl.gossip.compress.base import Compressor, purpose, segment
from p2pfl.gossip.compress.qsgd import QSGD
from p2pfl.gossip.compress.randomk import RandomK
from p2pfl.gossip.compress.sign import Sign
from p2pfl.gossip.compress.topk import TopK
from p2pfl.seeding import numpy_rng

from conftest import ROOT, run_job

HEADER, F32 = 16, 4
SEED, PEER, ROUND = 11, 3, 7
#: Layouts of a mixed vector: a 1-element segment, equal segments, one long segment among short ones.
LAYOUTS = [[1, 9, 30], [50], [7, 1, 1, 40, 3], [16, 16], [3, 200, 1, 64]]


def _vector(d: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    """Distinct magnitudes over several scales (no top-k ties), some coordinates negative."""
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.standard_normal(d) * np.exp(rng.uniform(-3, 3, d))).to(dtype)


def _per_tensor(codec: Compressor, layout: list[int]) -> Compressor:
    codec.per_tensor(layout)
    return codec


def _roundtrip(codec: Compressor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    payload = codec.encode(PEER, v, ROUND)
    return codec.decode(PEER, payload, ROUND), payload


def _k(rho: str, d: int) -> int:
    return min(d, math.ceil(Fraction(rho) * d))


# --- top-k against numpy, and its bytes by hand


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rho", ["0.1", "0.3", "1.0"])
def test_per_tensor_top_k_keeps_the_largest_of_each_segment(layout: list[int], rho: str) -> None:
    v = _vector(sum(layout))
    got, payload = _roundtrip(_per_tensor(TopK(float(rho)), layout), v)
    want, at = np.zeros(sum(layout), dtype=np.float32), 0
    for d in layout:
        part = v.numpy()[at:at + d]
        keep = np.argsort(-np.abs(part))[:_k(rho, d)]
        want[at + keep] = part[keep]
        at += d
    assert np.array_equal(got.numpy(), want)
    hand = HEADER + sum(_k(rho, d) * F32 for d in layout) \
        + sum(math.ceil(_k(rho, d) * max(1, math.ceil(math.log2(d))) / 8) for d in layout)
    assert payload.numel() == hand == _per_tensor(TopK(float(rho)), layout).size(sum(layout), torch.float32)


def test_per_tensor_top_k_differs_from_the_vector_s_where_scales_differ() -> None:
    """A segment of large values next to one of small ones: the vector's top-k keeps none of the small segment,
    the per-tensor top-k ⌈ρ·d_i⌉ of each."""
    v = torch.cat([torch.full((20,), 100.0) + torch.arange(20.0), torch.arange(1.0, 21.0) / 1000])
    whole = TopK(0.25).decode(0, TopK(0.25).encode(0, v, 0), 0)
    split = _per_tensor(TopK(0.25), [20, 20])
    each = split.decode(0, split.encode(0, v, 0), 0)
    assert int((whole[20:] != 0).sum()) == 0 and int((whole[:20] != 0).sum()) == 10
    assert int((each[20:] != 0).sum()) == 5 and int((each[:20] != 0).sum()) == 5
    assert torch.equal(each[20:][each[20:] != 0], torch.arange(16.0, 21.0) / 1000)


# --- sign and qsgd against their closed forms, per segment


@pytest.mark.parametrize("layout", LAYOUTS)
def test_per_tensor_sign_is_each_segment_s_l1_mean_times_its_signs(layout: list[int]) -> None:
    v = _vector(sum(layout), torch.float64)
    got, payload = _roundtrip(_per_tensor(Sign(), layout), v)
    want = torch.cat([p.abs().sum() / p.numel() * torch.where(p < 0, -1.0, 1.0).double() for p in v.split(layout)])
    assert torch.allclose(got, want, rtol=1e-15, atol=0)
    assert payload.numel() == HEADER + 8 * len(layout) + sum(math.ceil(d / 8) for d in layout)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_per_tensor_qsgd_sends_levels_of_each_segment_s_norm_and_tau(layout: list[int]) -> None:
    """Each decoded coordinate is sign(v_l)·m·‖v_i‖₂/(s·τ(d_i)) with m an integer level in [0, s] that rounds
    s|v_l|/‖v_i‖₂ down or up (the segment's own norm and τ, not the vector's)."""
    s = 4
    v = _vector(sum(layout), torch.float64)
    got, payload = _roundtrip(_per_tensor(QSGD(s, SEED), layout), v)
    for part, dec in zip(v.split(layout), got.split(layout)):
        d, norm = part.numel(), float(torch.linalg.vector_norm(part))
        unit = norm / (s * (1 + min(d / s ** 2, math.sqrt(d) / s)))
        level = dec.abs() / unit
        assert torch.allclose(level, level.round(), atol=1e-9) and bool((level.round() <= s).all())
        exact = s * part.abs() / norm
        assert bool(((level.round() >= exact.floor() - 1e-9) & (level.round() <= exact.ceil() + 1e-9)).all())
        assert bool((torch.sign(dec)[dec != 0] == torch.sign(part)[dec != 0]).all())
    width = math.ceil(math.log2(s + 1)) + 1
    assert payload.numel() == HEADER + 8 * len(layout) + sum(math.ceil(d * width / 8) for d in layout)


# --- every codec per tensor is the vector codec on each segment alone, with that segment's stream


def _quantised_top_k() -> Compressor:
    from p2pfl import plugins
    plugins.load([str(ROOT / "examples" / "plugins" / "codec.py")])
    from p2pfl.gossip.compress import CODECS
    return CODECS.get("quantised-top-k")(0.2, 4)


CODECS_ = {"top-k": lambda: TopK(0.2), "random-k": lambda: RandomK(0.2, SEED), "qsgd": lambda: QSGD(3, SEED),
           "sign": Sign, "quantised-top-k (plug-in)": _quantised_top_k}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", list(CODECS_))
def test_every_codec_per_tensor_is_the_vector_codec_on_each_segment(name: str, layout: list[int]) -> None:
    v = _vector(sum(layout))
    got, payload = _roundtrip(_per_tensor(CODECS_[name](), layout), v)
    alone, want = CODECS_[name](), []
    for i, part in enumerate(v.split(layout)):
        with segment(i):
            want.append(alone.decode(PEER, alone.encode(PEER, part, ROUND), ROUND))
    assert torch.equal(got, torch.cat(want))
    assert payload.numel() == HEADER + sum(alone.size(d, torch.float32) - HEADER for d in layout)
    assert payload.numel() == _per_tensor(CODECS_[name](), layout).size(sum(layout), torch.float32)


def test_each_segment_draws_from_its_own_stream() -> None:
    """random-k on two equal segments of one vector picks different coordinates in each: segment i's are those of
    the stream (seed, peer, round, "compress", i), segment 0's today's (seed, peer, round, "compress")."""
    assert purpose(ROUND) == f"compress/{ROUND}"
    with segment(2):
        assert purpose(ROUND) == f"compress/{ROUND}/2"
    assert purpose(ROUND) == f"compress/{ROUND}"
    d, k = 40, 8
    v = torch.arange(1.0, d + 1).repeat(2)
    got, _ = _roundtrip(_per_tensor(RandomK(k / d, SEED), [d, d]), v)
    for i, part in enumerate(got.split([d, d])):
        name = f"compress/{ROUND}" if i == 0 else f"compress/{ROUND}/{i}"
        drawn = np.sort(numpy_rng(SEED, PEER, name).choice(d, size=k, replace=False, shuffle=False))
        assert np.array_equal(np.flatnonzero(part.numpy()), drawn)
    assert not torch.equal(got[:d] != 0, got[d:] != 0)


# --- vector scope is today's message; a layout must cover the vector


@pytest.mark.parametrize("name", list(CODECS_))
def test_vector_scope_and_a_one_segment_layout_send_today_s_message(name: str) -> None:
    """Today's encode (the whole flat vector compressed once, then packed) written out here; the default codec and
    one bound to a single segment send it byte for byte and decode it alike."""
    v = _vector(300)
    today = message.pack(300, *CODECS_[name]().compress(PEER, v, ROUND))
    vector = CODECS_[name]()
    assert vector.layout is None and torch.equal(vector.encode(PEER, v, ROUND), today)
    one = _per_tensor(CODECS_[name](), [300])
    assert torch.equal(one.encode(PEER, v, ROUND), today)
    assert torch.equal(one.decode(PEER, today, ROUND), vector.decode(PEER, today, ROUND))
    assert one.size(300, torch.float32) == vector.size(300, torch.float32) == today.numel()


def test_a_layout_must_cover_the_vector_and_empty_tensors_carry_nothing() -> None:
    codec = _per_tensor(Sign(), [0, 5, 0, 3])
    assert codec.layout == (5, 3)
    with pytest.raises(ValueError, match="--compress-scope tensor: a vector of 9 values"):
        codec.encode(0, torch.ones(9), 0)
    with pytest.raises(ValueError, match="no tensor"):
        Sign().per_tensor([0])


def test_the_scope_is_every_compressor_s_option_and_keeps_its_flag_key_and_record(tmp_path: Path) -> None:
    """--compress-scope is declared by the Compressor base, so every compressor (and only a compressor) takes it;
    not the core; its flag, YAML key and config.yaml entry are what they were."""
    import dataclasses

    from p2pfl.cli import parse_args
    from p2pfl.config import RunConfig, to_yaml
    from p2pfl.gossip.compress import CODECS
    from p2pfl.registry import options_class

    for name in CODECS.names():
        declared = options_class(CODECS.get(name))
        fields = {f.name for f in dataclasses.fields(declared)} if declared is not None else set()
        assert ("compress_scope" in fields) == issubclass(CODECS.get(name), Compressor), name
    assert "compress_scope" in {f.name for f in dataclasses.fields(options_class(TopK))} and "none" in CODECS.names()
    assert "compress_scope" not in {f.name for f in dataclasses.fields(RunConfig)}
    config = tmp_path / "c.yaml"
    config.write_text("algorithm: consensus\ncompress: top-k\ncompress_scope: tensor\n")
    from_flag, _ = parse_args(["--algorithm", "consensus", "--compress", "top-k", "--compress-scope", "tensor"])
    from_file, _ = parse_args(["--config", str(config)])
    assert from_flag.compress_scope == from_file.compress_scope == "tensor" and from_flag == from_file
    assert from_flag.to_dict()["compress_scope"] == "tensor" and "\ncompress_scope: tensor\n" in to_yaml(from_flag)


# --- in a run


def _run(runs_dir: Path, name: str, *args: str) -> tuple[dict, list[dict]]:
    proc = run_job(["-m", "p2pfl.run", *args, "--out", str(runs_dir), "--name", name, "--no-progress",
                    "--no-plots"], ranks=0)
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = json.loads((runs_dir / name / "manifest.json").read_text())
    records = [json.loads(line) for line in (runs_dir / name / "metrics.jsonl").read_text().splitlines()]
    return manifest, records


LEARNER = ["--algorithm", "fedavg", "--dataset", "synthetic", "--peers", "4", "--rounds", "3", "--topology", "cycle",
           "--eval-every", "3", "--compress", "top-k", "--compress-ratio", "0.05"]


def test_a_run_sends_and_records_the_per_tensor_message(runs_dir: Path, tmp_path: Path) -> None:
    """fedavg on the cycle, top-k at ρ = 0.05 per tensor: the model's tensors (its parameters and floating buffers,
    read off the model here) are the layout; the manifest's message_bytes is the hand count over them, and each
    peer's bytes_sent a round are two such messages (one per neighbour)."""
    from helpers_inproc import setup_algorithm
    algorithm = setup_algorithm(tmp_path / "inproc", algorithm="fedavg", topology="cycle")
    model = algorithm.peers[0].model
    layout = [t.numel() for _, t in model.named_parameters()] \
        + [b.numel() for _, b in model.named_buffers() if b.is_floating_point()]
    d = sum(layout)
    kept = [_k("0.05", n) for n in layout]
    hand = HEADER + F32 * sum(kept) + sum(math.ceil(k * max(1, math.ceil(math.log2(n))) / 8)
                                          for k, n in zip(kept, layout))
    manifest, records = _run(runs_dir, "tensor", *LEARNER, "--compress-scope", "tensor")
    entry = manifest["compression"]
    assert (entry["scope"], entry["segments"], entry["d"], entry["kept"]) == ("tensor", len(layout), d, sum(kept))
    assert entry["message_bytes"] == hand
    rounds = [r for r in records if r["type"] == "round" and r["round"] > 0]
    assert len(rounds) == 3 and all(r["bytes_sent_per_peer"] == {str(p): 2 * hand for p in range(4)} for r in rounds)
    assert all(math.isfinite(r["loss_mean"]) for r in rounds)
    vector, _ = _run(runs_dir, "vector", *LEARNER)
    assert (vector["compression"]["scope"], vector["compression"]["segments"]) == ("vector", 1)
    assert vector["compression"]["kept"] == _k("0.05", d)
    assert vector["compression"]["message_bytes"] == HEADER + F32 * _k("0.05", d) \
        + math.ceil(_k("0.05", d) * math.ceil(math.log2(d)) / 8)


SEGMENTED = '''
from p2pfl.algorithms import register_method
from p2pfl.algorithms.consensus import Consensus


@register_method("segmented-consensus")
class Segmented(Consensus):
    """Consensus whose vector is read as tensors of 1, 9 and the rest."""

    def mixed_layout(self):
        return [1, 9, self.mixed_vector()[0] - 10]
'''


@pytest.mark.numerics
@pytest.mark.parametrize("codec", [("qsgd", "0.3"), ("sign", "0.05"), ("random-k", "0.2")])
def test_choco_gossip_per_tensor_keeps_the_mean_and_converges_on_failing_links(runs_dir: Path, tmp_path: Path,
                                                                               codec: tuple[str, str]) -> None:
    """CHOCO-gossip on a cycle of 8 with links failing (lagging links catch up by replays and resets sized by the
    per-tensor message), the vector read as three tensors: the network mean moves only by float64 rounding and the
    distance to it shrinks by a steady factor, as under vector scope (tests/test_choco.py's property)."""
    plugin = tmp_path / "segmented.py"
    plugin.write_text(SEGMENTED)
    name, gamma = codec
    manifest, records = _run(runs_dir, name, "--plugin", str(plugin), "--algorithm", "segmented-consensus",
                             "--peers", "8", "--rounds", "300", "--vector-size", "50", "--vector-dtype", "float64",
                             "--topology", "cycle", "--link-failure", "0.2", "--gossip", "choco", "--compress", name,
                             "--compress-ratio", "0.2", "--consensus-step", gamma, "--compress-scope", "tensor",
                             "--eval-every", "100")
    assert (manifest["compression"]["scope"], manifest["compression"]["segments"]) == ("tensor", 3)
    evals = [r["metrics"] for r in records if r["type"] == "eval"]
    assert len(evals) == 3 and all(e["mean_shift"] < 1e-13 for e in evals), evals
    distance = [e["distance_to_mean_peer_max"] for e in evals]
    assert all(later < 0.75 * earlier for earlier, later in zip(distance, distance[1:])), distance
    message = manifest["compression"]["message_bytes"]
    sizes = {v for r in records if r["type"] == "round" and r["round"] > 0 for v in r["bytes_sent_per_peer"].values()}
    assert any(v % message for v in sizes), sizes  # a bundle (replay or reset) travelled
