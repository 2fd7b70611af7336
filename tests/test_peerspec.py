"""The peer specification of heterogeneous runs (SPEC §6): ranges, counts and defaults, one-line errors, presets."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from p2pfl.config import load_yaml, make_config
from p2pfl.fedmuscle.peerspec import PeerSpecError, load_peers_spec, parse_peers_spec

from conftest import ROOT, run_job

TINY_VIT = {"depth": 1, "hidden_size": 32, "heads": 2, "patch_size": 8}


def write_yaml(path: Path, data) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


GRAY28 = {"channels": 1, "image_size": 28}


def two_family_spec(per_group: int = 2, public_size: int = 200) -> dict:
    """simple-cnn on 10-class gray 28x28 synthetic images (public images converted to that format), a tiny
    ViT on multi-label mosaics of 6 of the classes of 32x32 RGB synthetic images (the public set's format)."""
    return {"public": {"size": public_size}, "test_subset": 100, "groups": [
        {"count": per_group, "model": "simple-cnn", "task": "synthetic", "dataset_options": GRAY28},
        {"count": per_group, "model": "vit-tiny", "model_options": TINY_VIT, "task": "mosaic",
         "dataset": "synthetic", "labels": [0, 1, 2, 3, 4, 5]},
    ]}


def test_peer_spec_expands_ranges_counts_and_defaults() -> None:
    spec = parse_peers_spec({
        "public": {"dataset": "cifar10", "size": 1000},
        "groups": [
            {"peers": "0-2", "model": "simple-cnn", "task": "cifar10"},
            {"count": 2, "model": "vit-tiny", "task": "cifar10-coarse"},
            {"peers": [5, "6..7"], "model": "resnet-small", "task": "mosaic", "labels": [1, 3, 5]},
            {"peers": 8, "model": "simple-cnn", "task": "fashion-mnist"},
        ]}, "s.yaml")
    assert spec.n_peers == 9
    assert [e.group for e in spec.peers] == [0, 0, 0, 1, 1, 2, 2, 2, 3]
    assert [e.dataset for e in spec.peers] == ["cifar10"] * 8 + ["fashion-mnist"]
    assert spec.peers[5].labels == (1, 3, 5) and spec.peers[5].metric == "mAP"
    assert spec.peers[0].metric == "accuracy"
    assert spec.public_size == 1000 and spec.public_key == "cifar10"
    m = spec.manifest()
    assert [(d["peer"], d["model"], d["task"]) for d in m][:4] == [
        (0, "simple-cnn", "cifar10"), (1, "simple-cnn", "cifar10"), (2, "simple-cnn", "cifar10"),
        (3, "vit-tiny", "cifar10-coarse")]
    # every group on synthetic data: the public set defaults to synthetic images too
    syn = parse_peers_spec(two_family_spec(), "s.yaml", public_size=300)
    assert syn.public_dataset == "synthetic" and syn.public_size == 200 and syn.n_peers == 4


@pytest.mark.parametrize("data,needle", [
    ({"groups": [{"peers": "0-1", "model": "simple-cnn", "task": "segmentation"}]}, "unknown task 'segmentation'"),
    ({"groups": [{"peers": "0-1", "model": "simple-cnn"}]}, "'task' is required"),
    ({"groups": [{"peers": "0-2", "model": "a", "task": "cifar10"},
                 {"peers": "2-3", "model": "b", "task": "mosaic"}]}, "peer 2 is already assigned by group 0"),
    ({"groups": [{"peers": [0, 2], "model": "a", "task": "cifar10"}]}, "peer(s) [1] have no group"),
    ({"groups": [{"peers": "3-1", "model": "a", "task": "cifar10"}]}, "empty range"),
    ({"groups": [{"peers": "0-1", "count": 2, "model": "a", "task": "cifar10"}]}, "exactly one of 'peers'"),
    ({"groups": [{"peers": "0-1", "model": "a", "task": "cifar10", "labels": [0, 10]}]}, "labels must lie in 0..9"),
    ({"groups": [{"peers": "0-1", "model": "a", "task": "cifar10-coarse", "dataset": "fashion-mnist"}]},
     "cifar10-coarse"),
    ({"groups": [{"peers": "0-1", "model": "a", "task": "cifar10", "colour": "red"}]}, "unknown key 'colour'"),
    ({"peers": 3, "groups": [{"peers": "0-3", "model": "a", "task": "cifar10"}]}, "peer 3 is beyond the 3 peers"),
    ({"groups": [{"peers": "0-1", "model": "a", "task": "cifar10"}], "public": {"size": -5}}, "size must be"),
    ({"groups": []}, "non-empty list"),
])
def test_peer_spec_errors_are_one_clear_line(data, needle: str) -> None:
    with pytest.raises(PeerSpecError) as info:
        parse_peers_spec(data, "bad.yaml")
    message = str(info.value)
    assert needle in message and message.startswith("--peers-spec bad.yaml") and "\n" not in message


def test_peer_spec_must_agree_with_peers() -> None:
    with pytest.raises(ValueError, match="assigns 4 peers but the run has --peers 5"):
        parse_peers_spec(two_family_spec(), "s.yaml", n_peers=5)


def test_bad_spec_ends_the_job_with_one_line(tmp_path: Path) -> None:
    spec = write_yaml(tmp_path / "bad.yaml", {"groups": [{"peers": "0-3", "model": "simple-cnn", "task": "nope"}]})
    proc = run_job(["-m", "p2pfl.run", "--algorithm", "fedmuscle", "--peers-spec", str(spec), "--out",
                    str(tmp_path), "--no-progress", "--no-plots"], ranks=0)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("p2pfl: error: --peers-spec") and "unknown task 'nope'" in lines[0]


@pytest.mark.parametrize("config", ["fedmuscle-cifar10-hetero.yaml", "fedmuscle-hf-lora.yaml"])
def test_presets_are_valid(config: str) -> None:
    values = load_yaml(str(ROOT / "launch" / "configs" / config))
    cfg = make_config(**{**values, "peers_spec": str(ROOT / values["peers_spec"])})
    spec = load_peers_spec(cfg.peers_spec, public_size=cfg.public_size)
    assert 6 <= spec.n_peers <= 12
    assert len({e.model for e in spec.peers}) >= 3 and len({e.task for e in spec.peers}) == 3
    assert spec.public_dataset == "cifar10" and spec.public_size == 5000


FOUR_SQUARES = '''
import numpy as np

from p2pfl.data.datasets import DATASETS, Arrays, Dataset


@DATASETS.register("four-squares")
class FourSquares(Dataset):
    """Four classes, the bright quadrant of a 16x16 gray image; classes 0 and 2 are the coarse class 0."""

    num_classes = 4
    coarse_classes = {coarse}

    def load(self) -> Arrays:
        rng = np.random.default_rng(0)
        y = np.arange(160) % 4
        x = rng.uniform(0, 0.3, (160, 16, 16)).astype(np.float32)
        for k in range(4):
            x[y == k, 8 * (k // 2):8 * (k // 2) + 8, 8 * (k % 2):8 * (k % 2) + 8] += 0.6
        return Arrays(x[:128], y[:128], x[128:], y[128:])
'''


def test_a_plugin_dataset_declaring_a_coarse_split_runs_the_coarse_task(tmp_path: Path) -> None:
    """cifar10-coarse asks the dataset component for its split (`coarse_classes`), not its name: a plug-in dataset
    that declares one runs it (two outputs, its classes 0 and 2 against 1 and 3), one that does not is refused with
    the datasets that do."""
    import torch

    from p2pfl.fedmuscle.tasks import coarse_labels

    assert coarse_labels(torch.arange(4), (0, 2), 4).tolist() == [0, 1, 0, 1]
    spec = write_yaml(tmp_path / "spec.yaml", {"public": {"dataset": "four-squares", "size": 32}, "groups": [
        {"count": 2, "model": "simple-cnn", "task": "cifar10-coarse", "dataset": "four-squares"}]})
    common = ["-m", "p2pfl.run", "--algorithm", "fedmuscle", "--peers", "2", "--rounds", "1", "--peers-spec",
              str(spec), "--local-steps", "1", "--batch-size", "8", "--rep-dim", "8", "--public-batch", "4",
              "--topology", "complete", "--out", str(tmp_path / "runs"), "--no-progress", "--no-plots"]
    for name, coarse in (("split", "(0, 2)"), ("none", "None")):
        plugin = tmp_path / name / "four_squares.py"
        plugin.parent.mkdir()
        plugin.write_text(FOUR_SQUARES.replace("{coarse}", coarse))
        proc = run_job([*common, "--plugin", str(plugin), "--name", name], ranks=0)
        if name == "split":
            assert proc.returncode == 0, proc.stderr[-3000:]
            manifest = yaml.safe_load((tmp_path / "runs" / name / "manifest.json").read_text())
            assert [m["outputs"] for m in manifest["models"]] == [2]
        else:
            assert proc.returncode == 2
            assert ("task 'cifar10-coarse' needs a 10-class CIFAR-like dataset (cifar10, synthetic), not "
                    "'four-squares'") in proc.stderr


def test_dataset_options_and_stand_ins_are_what_the_dataset_components_declare() -> None:
    """Dataset options reach the datasets whose `load` takes them (the synthetic set: synthetic_arrays' keywords),
    and a task named after a dataset reads it or a stand-in (a generated set), whose public set defaults to it."""
    import inspect

    from p2pfl.data.datasets import DATASETS, STAND_IN, Arrays, Dataset
    from p2pfl.data.datasets.synthetic import synthetic_arrays
    from p2pfl.plugin_scope import isolated

    def refused(group: dict) -> str:
        with pytest.raises(PeerSpecError) as info:
            parse_peers_spec({"groups": [{"peers": "0-1", "model": "a", **group}]}, "bad.yaml")
        return str(info.value)

    keywords = ", ".join(inspect.signature(synthetic_arrays).parameters)
    assert refused({"task": "cifar10", "dataset_options": {"seed": 1}}).endswith(
        "dataset options apply to the synthetic dataset only, not 'cifar10'")
    assert refused({"task": "synthetic", "dataset_options": {"colour": 1}}).endswith(
        f"unknown dataset option(s) colour; allowed: {keywords}")
    assert refused({"task": "cifar100", "dataset": "cifar10"}).endswith(
        "task 'cifar100' reads dataset 'cifar100' (or synthetic), not 'cifar10'")
    with isolated():
        @DATASETS.register("noise-images")
        class NoiseImages(Dataset):
            capabilities = frozenset({STAND_IN})
            num_classes = 10

            def load(self) -> Arrays:  # never loaded here
                raise AssertionError

        spec = parse_peers_spec({"groups": [{"peers": "0-1", "model": "a", "task": "cifar100",
                                             "dataset": "noise-images"}]}, "s.yaml")
        assert spec.public_dataset == "noise-images"
        assert refused({"task": "cifar100", "dataset": "cifar10"}).endswith(
            "task 'cifar100' reads dataset 'cifar100' (or synthetic or noise-images), not 'cifar10'")
    mixed = parse_peers_spec({"groups": [{"peers": "0", "model": "a", "task": "synthetic"},
                                         {"peers": "1", "model": "a", "task": "cifar10"}]}, "s.yaml")
    assert mixed.public_dataset == "cifar10"
