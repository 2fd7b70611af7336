"""FedMuscle (SPEC §6): the shared public batch, seeded neighbour sampling, what the
alignment phase may change, equality with local training at T = 0, LoRA peers, and a 4-rank job."""
from __future__ import annotations

import itertools
import json
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from p2pfl.data import load_dataset, to_geometry
from p2pfl.evaluation import multilabel_scores
from p2pfl.fedmuscle.algorithm import FedMuscle, public_batch_indices, sample_neighbours, server_bytes_per_round
from p2pfl.fedmuscle.tasks import split_public
from p2pfl.losses import muscle_loss
from p2pfl.seeding import SHARED, numpy_rng

from conftest import run_job
from helpers_inproc import setup_algorithm
from test_peerspec import GRAY28, TINY_VIT, two_family_spec, write_yaml


def make_algorithm(tmp_path: Path, spec: dict | None, n_peers: int, topology: str = "complete", **options
                   ) -> FedMuscle:
    """A set-up FedMuscle of n_peers peers in this process (one rank)."""
    if spec is not None:
        options["peers_spec"] = str(write_yaml(tmp_path / "spec.yaml", spec))
    return setup_algorithm(tmp_path, algorithm="fedmuscle", peers=n_peers, topology=topology,
                           **{"dataset": "fashion-mnist", **options})


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def changed(before: dict[str, torch.Tensor], model: torch.nn.Module) -> set[str]:
    return {n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())}


# ------------------------------------------------------------------------------------------------ pure pieces

def test_public_batch_is_the_shared_seeded_draw() -> None:
    a = public_batch_indices(7, 3, 1, 500, 32)
    assert np.array_equal(a, numpy_rng(7, SHARED, "public/3/1").choice(500, size=32, replace=False))
    assert len(set(a.tolist())) == 32 and a.max() < 500
    assert not np.array_equal(a, public_batch_indices(7, 3, 2, 500, 32))
    assert not np.array_equal(a, public_batch_indices(7, 4, 1, 500, 32))
    with pytest.raises(ValueError, match="public-batch"):
        public_batch_indices(7, 3, 1, 10, 32)


def test_neighbour_sampling_is_seeded_per_peer_and_round() -> None:
    nbrs = [9, 2, 5, 7, 4]
    draw = sample_neighbours(0, 3, 1, 0, nbrs, 3)
    assert draw == sample_neighbours(0, 3, 1, 0, list(reversed(nbrs)), 3)  # order of the inbox is irrelevant
    assert len(draw) == 3 and set(draw) <= set(nbrs) and draw == sorted(draw)
    assert sample_neighbours(0, 3, 1, 0, nbrs, 5) == sorted(nbrs)
    assert sample_neighbours(0, 3, 1, 0, nbrs, 9) == sorted(nbrs)
    # uniform over neighbours: each is picked with frequency M/deg
    counts = {q: 0 for q in nbrs}
    rounds = 3000
    for r in range(rounds):
        for q in sample_neighbours(0, 3, r, 0, nbrs, 2):
            counts[q] += 1
    for q in nbrs:
        assert counts[q] / rounds == pytest.approx(2 / 5, abs=0.04)
    # other peers and rounds draw independently
    draws = {tuple(sample_neighbours(0, p, r, 0, nbrs, 2)) for p in range(4) for r in range(4)}
    assert len(draws) > 4


def test_public_images_in_every_input_format() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (5, 3, 32, 32), generator=g, dtype=torch.uint8)
    assert to_geometry(x, 3, 32) is x
    gray = to_geometry(x, 1, 32)
    expect = (0.2989 * x[:, 0].float() + 0.587 * x[:, 1].float() + 0.114 * x[:, 2].float()).round()
    assert gray.dtype == torch.uint8 and gray.shape == (5, 1, 32, 32)
    assert torch.equal(gray[:, 0], expect.clamp(0, 255).to(torch.uint8))
    small = to_geometry(x, 1, 28)
    assert small.shape == (5, 1, 28, 28) and small.dtype == torch.uint8
    flat = torch.full((2, 3, 32, 32), 77, dtype=torch.uint8)  # resizing a constant image keeps it
    assert torch.equal(to_geometry(flat, 3, 28), torch.full((2, 3, 28, 28), 77, dtype=torch.uint8))
    assert to_geometry(small, 3, 32).shape == (5, 3, 32, 32)


def _brute_ap(scores: list[float], truth: list[bool]) -> float:
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    hits, total = 0, 0.0
    for rank, i in enumerate(order, 1):
        if truth[i]:
            hits += 1
            total += hits / rank
    return total / max(1, sum(truth))


def test_multilabel_scores_against_brute_force() -> None:
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(40, 6, generator=g)
    targets = (torch.rand(40, 6, generator=g) < 0.3).float()
    targets[:, 5] = 0  # a class with no positive is left out of the means
    s = multilabel_scores(logits, targets)
    aps = [_brute_ap(logits[:, c].tolist(), (targets[:, c] > 0).tolist()) for c in range(5)]
    assert s["mAP"] == pytest.approx(sum(aps) / 5, abs=1e-6)
    pred, t = logits > 0, targets > 0
    f1 = []
    for c in range(5):
        tp = int((pred[:, c] & t[:, c]).sum())
        fp = int((pred[:, c] & ~t[:, c]).sum())
        fn = int((~pred[:, c] & t[:, c]).sum())
        f1.append(2 * tp / (2 * tp + fp + fn))
    assert s["f1"] == pytest.approx(sum(f1) / 5, abs=1e-6)
    tp, fp, fn = int((pred & t).sum()), int((pred & ~t).sum()), int((~pred & t).sum())
    assert s["f1_micro"] == pytest.approx(2 * tp / (2 * tp + fp + fn), abs=1e-6)
    assert multilabel_scores(targets * 10 - 5, targets)["mAP"] == pytest.approx(1.0)


def test_server_figure_grows_as_b_to_the_m() -> None:
    a = server_bytes_per_round(10, 1, 32, 256, 3)
    b = server_bytes_per_round(10, 1, 32, 256, 5)
    assert a["downlink_bytes_per_peer"] == 32 ** 3 * 257 * 4
    assert b["downlink_bytes_per_peer"] / a["downlink_bytes_per_peer"] == 32 ** 2
    assert a["bytes_per_round"] == 10 * (32 * 256 * 4 + 32 ** 3 * 257 * 4)


# ------------------------------------------------------------------------------------------------ one process

def test_alignment_phase_changes_only_the_representation_model(tmp_path: Path) -> None:
    algo = make_algorithm(tmp_path, two_family_spec(), 4, dataset="synthetic", train_subset=400, local_steps=1,
                          batch_size=16, contrastive_steps=2, muscle_m=2, rep_dim=16, public_batch=8)
    for p in range(4):
        algo.local_update(p, 1)
    before = {p: snapshot(algo.peers[p].model) for p in range(4)}
    algo.communicate(1, algo.ctx.schedule.at(1, active=set(range(4))))
    for p in range(4):
        model = algo.peers[p].model
        rep = {n for n, _ in model.named_parameters() if n.startswith(("encoder.", "projection."))}
        moved = changed(before[p], model)
        assert moved <= rep, moved - rep  # the task head never moves here
        assert any(n.startswith("projection.") for n in moved) and any(n.startswith("encoder.") for n in moved)
        assert np.isfinite(algo.peers[p].last_align)


def test_task_groups_share_nothing_and_the_public_set_is_held_out(tmp_path: Path) -> None:
    spec = {"public": {"size": 300}, "groups": [
        {"peers": [0, 1], "model": "simple-cnn", "task": "synthetic"},
        {"peers": 2, "model": "vit-tiny", "model_options": TINY_VIT, "task": "synthetic"},  # same task group
        {"peers": [3, 4], "model": "simple-cnn", "task": "mosaic", "dataset": "synthetic", "labels": [0, 1, 2, 3]},
        {"peers": 5, "model": "simple-cnn", "task": "synthetic", "dataset_options": GRAY28}]}
    algo = make_algorithm(tmp_path, spec, 6, dataset="synthetic", train_subset=1200, alpha=1.0)
    assert [[e.peer for e in g] for g in algo.work.spec.task_groups()] == [[0, 1, 2], [3, 4], [5]]
    private, public = split_public(2000, 300, 0)
    rgb = [set(algo.work.parts[p].tolist()) for p in range(5)]
    for a, b in itertools.combinations(rgb, 2):
        assert not a & b
    # --train-subset caps the private pool (the public images are never in it)
    assert set().union(*rgb) <= set(private.tolist())
    # 3 + 2 peers split the pool in proportion; the label set keeps only its classes
    assert len(set().union(*rgb[:3])) == 1200 * 3 // 5
    ds = load_dataset("synthetic")
    mosaic_labels = ds.y_train[torch.as_tensor(np.concatenate([algo.work.parts[3], algo.work.parts[4]]))]
    assert set(mosaic_labels.tolist()) == {0, 1, 2, 3} and 0.3 * 480 < len(mosaic_labels) < 0.5 * 480
    # every peer of a task group has the same test set
    tests = [algo.work.tasks[p].test for p in range(5)]
    assert tests[0] is tests[1] is tests[2] and tests[3] is tests[4]
    assert algo.work.tasks[3].test[1].shape[1] == 4 and algo.peers[3].model.head.fc.out_features == 4
    # another dataset: nothing held out of it; a seeded subset (not the first N: real archives are class-sorted)
    assert len(set(algo.work.parts[5].tolist())) == 1200 and algo.work.parts[5].max() >= 1200
    # the public images, once per input format
    assert set(algo.work.public) == {(3, 32), (1, 28)}
    assert torch.equal(algo.work.public[(1, 28)], to_geometry(algo.work.public[(3, 32)], 1, 28))
    assert torch.equal(algo.work.public[(3, 32)], ds.x_train[torch.as_tensor(public)])


def test_alignment_with_partial_participation_leaves_inactive_peers_alone(tmp_path: Path) -> None:
    algo = make_algorithm(tmp_path, two_family_spec(), 4, dataset="synthetic", train_subset=400, local_steps=1,
                          batch_size=16, contrastive_steps=1, muscle_m=3, rep_dim=16, public_batch=8)
    before = {p: snapshot(algo.peers[p].model) for p in range(4)}
    algo.communicate(1, algo.ctx.schedule.at(1, active={0, 2, 3}))
    assert changed(before[1], algo.peers[1].model) == set()
    assert {p for p, peer in algo.peers.items() if peer.last_align is not None} == {0, 2, 3}
    assert algo.ctx.transport.stats.peer_sent.get(1, 0) == 0
    assert algo.ctx.transport.stats.peer_sent[0] == 2 * 8 * 16 * 4  # two active neighbours, B x d float32


@pytest.fixture
def tiny_hf_vit(tmp_path: Path) -> Path:
    """A tiny transformers ViT saved as a local Hugging Face checkpoint (nothing downloaded)."""
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)  # ViTModel's own random init; p2pfl keeps these "pretrained" weights
    path = tmp_path / "tiny-vit"
    ViTModel(ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=1,
                       num_attention_heads=2, intermediate_size=64)).save_pretrained(path)
    return path


def hf_spec(path: Path) -> dict:
    return {"public": {"size": 200}, "test_subset": 100, "groups": [
        {"peers": 0, "model": f"hf:{path}", "model_options": {"lora_rank": 4}, "task": "synthetic"},
        {"peers": [1, 2], "model": "simple-cnn", "task": "synthetic"}]}


def test_lora_peer_changes_only_adapters_and_heads(tmp_path: Path, tiny_hf_vit: Path) -> None:
    algo = make_algorithm(tmp_path, hf_spec(tiny_hf_vit), 3, dataset="synthetic", train_subset=300, local_steps=2,
                          batch_size=16, contrastive_steps=2, muscle_m=2, rep_dim=16, public_batch=8)
    model = algo.peers[0].model
    start = snapshot(model)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n or n.startswith(("projection.", "head.")) for n in trainable)
    assert any("lora_" in n for n in trainable)
    for t in (1, 2):
        for p in range(3):
            algo.local_update(p, t)
        mid = snapshot(model)
        algo.communicate(t, algo.ctx.schedule.at(t, active={0, 1, 2}))
        assert not any(n.startswith("head.") for n in changed(mid, model))  # alignment: no head
    moved = changed(start, model)
    assert moved <= trainable  # the pretrained backbone is frozen
    assert any("lora_A" in n for n in moved) and any("lora_B" in n for n in moved)
    assert any(n.startswith("head.") for n in moved) and any(n.startswith("projection.") for n in moved)


def test_hf_peer_and_cnn_peers_align(tmp_path: Path, tiny_hf_vit: Path) -> None:
    """The Muscle loss of the transformers peer against the CNN peers (and theirs) falls over rounds."""
    algo = make_algorithm(tmp_path, hf_spec(tiny_hf_vit), 3, dataset="synthetic", train_subset=300, local_steps=1,
                          batch_size=32, contrastive_steps=8, muscle_m=2, rep_dim=32, lr=5e-3)
    idx = torch.as_tensor(public_batch_indices(99, 0, 0, algo.work.n_public, 32))

    def fixed_batch_losses() -> list[float]:
        with torch.no_grad():
            z = {p: algo.represent(algo.peers[p], idx) for p in range(3)}
            return [float(muscle_loss(z[p], [z[q] for q in range(3) if q != p])) for p in range(3)]

    first = fixed_batch_losses()
    per_round = []
    for t in range(1, 7):
        for p in range(3):
            algo.local_update(p, t)
        algo.communicate(t, algo.ctx.schedule.at(t, active={0, 1, 2}))
        per_round.append([algo.peers[p].last_align for p in range(3)])
    last = fixed_batch_losses()
    for p in range(3):
        assert last[p] < first[p] - 0.5, (p, first, last)
        assert per_round[-1][p] < per_round[0][p], (p, per_round)


# ------------------------------------------------------------------------------------------------ jobs

def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _job(tmp_path: Path, name: str, ranks: int, *args: str) -> Path:
    proc = run_job(["-m", "p2pfl.run", "--out", str(tmp_path / "runs"), "--name", name, "--no-progress",
                    "--no-plots", "--dataset", "synthetic", *args], ranks=ranks)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return tmp_path / "runs" / name


@pytest.mark.mpi
def test_fedmuscle_job_on_4_ranks_writes_everything_and_does_not_depend_on_layout(tmp_path: Path) -> None:
    spec = write_yaml(tmp_path / "spec.yaml", two_family_spec(per_group=3))
    args = ["--algorithm", "fedmuscle", "--peers-spec", str(spec), "--topology", "random", "--p", "0.6",
            "--rounds", "2", "--eval-every", "1", "--train-subset", "600", "--local-steps", "2", "--batch-size", "16",
            "--contrastive-steps", "2", "--muscle-m", "2", "--public-batch", "8", "--rep-dim", "16"]
    run4 = _job(tmp_path, "r4", 4, *args)
    for name in ("config.yaml", "manifest.json", "metrics.jsonl", "summary.json"):
        assert (run4 / name).is_file(), name
    manifest = json.loads((run4 / "manifest.json").read_text())
    assert [(s["peer"], s["model"], s["task"]) for s in manifest["peers_spec"]] == \
        [(p, "simple-cnn", "synthetic") for p in range(3)] + [(p, "vit-tiny", "mosaic") for p in range(3, 6)]
    assert len(manifest["hosts"]) == 4
    assert [m["input"] for m in manifest["models"]] == [[1, 28], [3, 32]]
    assert manifest["partition"]["task_groups"] == [0, 0, 0, 1, 1, 1]
    records = _records(run4)
    evals = [r for r in records if r["type"] == "eval"]
    assert [r["round"] for r in evals] == [1, 2]
    for r in evals:
        assert set(r["per_peer"]) == {str(p) for p in range(6)}
        for p, m in r["per_peer"].items():
            assert 0.0 <= m["task_metric"] <= 1.0 and np.isfinite(m["muscle_loss"])
            assert m["task_metric_name"] == ("accuracy" if int(p) < 3 else "mAP")
            assert ("f1" in m) == (int(p) >= 3)
    rounds = [r for r in records if r["type"] == "round" and r["round"] >= 1]
    assert all(set(r["muscle_loss"]) == {str(p) for p in range(6)} for r in rounds)
    summary = json.loads((run4 / "summary.json").read_text())
    comm = summary["communication"]
    edges = manifest["topology"]["edges"]
    degree = {p: sum(p in e for e in edges) for p in range(6)}
    for p in range(6):  # T * deg * B * d * 4 bytes a round
        assert comm["bytes_sent_per_peer_round_by_peer"][str(p)] == 2 * degree[p] * 8 * 16 * 4
        assert rounds[0]["bytes_sent_per_peer"][str(p)] == 2 * degree[p] * 8 * 16 * 4
    assert comm["server_downlink_bytes_per_peer_round"] == 2 * 8 ** 2 * 17 * 4

    # the same job in one process: bitwise the same numbers
    run1 = _job(tmp_path, "r1", 0, *args)
    assert [r.get("muscle_loss") for r in _records(run1)] == [r.get("muscle_loss") for r in records]
    assert [r.get("per_peer") for r in _records(run1) if r["type"] == "eval"] == [r["per_peer"] for r in evals]

    # every peer drew the same public batches (the shared stream), and its own neighbour samples
    final = evals[-1]["per_peer"]
    crc = 0
    for t, s in itertools.product((1, 2), (0, 1)):
        crc = zlib.crc32(public_batch_indices(0, t, s, 200, 8).astype(np.int64).tobytes(), crc)
    assert {m["public_digest"] for m in final.values()} == {f"{crc:08x}"}
    neighbours = {p: [q for e in edges for q in e if p in e and q != p] for p in range(6)}
    for p in range(6):
        crc = 0
        for t, s in itertools.product((1, 2), (0, 1)):
            chosen = sample_neighbours(0, p, t, s, neighbours[p], 2)
            crc = zlib.crc32(np.asarray([-1, *chosen], dtype=np.int64).tobytes(), crc)
        assert final[str(p)]["sample_digest"] == f"{crc:08x}"


def _models(run_dir: Path, n: int) -> list[dict[str, torch.Tensor]]:
    from p2pfl.runtime.checkpoint import load_peer, load_state

    last = load_state(run_dir)["round"]
    return [load_peer(run_dir, p, last, torch.device("cpu"))["model"] for p in range(n)]


@pytest.mark.mpi
def test_zero_contrastive_steps_is_local_training_bitwise(tmp_path: Path) -> None:
    """fedmuscle --contrastive-steps 0 == local --peers-spec (on another layout) == the supervised local
    baseline, whose shards, initialisation and steps a one-group spec reproduces exactly."""
    spec = write_yaml(tmp_path / "spec.yaml", {
        "public": {"dataset": "synthetic", "options": {"seed": 1}, "size": 100},
        "groups": [{"count": 4, "model": "simple-cnn", "task": "synthetic"}]})
    common = ["--rounds", "2", "--local-epochs", "1", "--batch-size", "64",
              "--checkpoint-every", "2", "--alpha", "0.5"]
    muscle = _job(tmp_path, "muscle", 0, "--algorithm", "fedmuscle", "--peers-spec", str(spec),
                  "--contrastive-steps", "0", *common)
    local = _job(tmp_path, "local", 2, "--algorithm", "local", "--peers-spec", str(spec), *common)
    supervised = _job(tmp_path, "supervised", 0, "--algorithm", "local", "--peers", "4", "--model", "simple-cnn",
                      "--probe-epochs", "1", "--batch-peers", "off", *common)  # bitwise against the loop
    m_eval = [r for r in _records(muscle) if r["type"] == "eval"][-1]["per_peer"]
    l_eval = [r for r in _records(local) if r["type"] == "eval"][-1]["per_peer"]
    s_eval = [r for r in _records(supervised) if r["type"] == "eval"][-1]["per_peer"]
    assert m_eval == l_eval
    assert [m_eval[str(p)]["task_metric"] for p in range(4)] == [s_eval[str(p)]["test_acc"] for p in range(4)]
    m_loss = [r["loss"] for r in _records(muscle) if r["type"] == "round" and r["round"] >= 1]
    assert m_loss == [r["loss"] for r in _records(supervised) if r["type"] == "round" and r["round"] >= 1]
    assert all(r.get("bytes_sent", 0) == 0 for r in _records(muscle) if r["type"] == "round")
    for a, b, c in zip(_models(muscle, 4), _models(local, 4), _models(supervised, 4)):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        for k, v in c.items():
            mine = a[k.replace("classifier.", "head.")]
            assert torch.equal(mine, v), k
    manifest = json.loads((local / "manifest.json").read_text())
    assert manifest["peers_spec"] == json.loads((muscle / "manifest.json").read_text())["peers_spec"]


