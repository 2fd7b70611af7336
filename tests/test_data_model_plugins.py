"""Datasets and models as plug-ins (examples/plugins/dataset.py, model.py): the normalisation computed from the
training images against numpy on the arrays the dataset gives; what a dataset gives checked in one line; the
model's output shape, feature dimension and parameter count against its closed form; the batched path used, or
refused with its reason; both through p2pfl.simulation.simulate; --model keeps accepting hf:PATH."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.func import functional_call

from p2pfl import plugins
from p2pfl.config import ConfigError, make_config
from p2pfl.data.datasets import DATASETS, Arrays, assemble, load_dataset
from p2pfl.models import build_encoder, count_parameters
from p2pfl.models.stacked import PeerStack, fold, peer_stacked, unfold, why_not_stackable

from helpers_inproc import setup_algorithm

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "plugins"
DATASET, MODEL = str(EXAMPLES / "dataset.py"), str(EXAMPLES / "model.py")


@pytest.fixture(scope="module", autouse=True)
def loaded() -> None:
    """Both examples registered as --plugin does (a later simulate(plugins=...) finds them loaded)."""
    plugins.load([DATASET, MODEL])


# ------------------------------------------------------------------ the dataset

def test_normalisation_is_computed_from_the_training_images() -> None:
    """No mean/std given: the stored uint8 images' own per-channel mean and (unbiased) std, as numpy computes
    them on the float NHWC arrays the dataset gives, rounded to uint8 first."""
    ds = load_dataset("blobs")
    given = DATASETS.get("blobs")(DATASETS.get("blobs").Options()).load()
    assert given.x_train.dtype == np.float32 and given.x_train.shape == (512, 16, 16, 3)
    q = np.round(given.x_train.astype(np.float64) * 255)
    assert ds.x_train.dtype == torch.uint8 and ds.x_train.shape == (512, 3, 16, 16) and ds.x_test.shape[0] == 128
    assert np.array_equal(ds.x_train.numpy(), q.transpose(0, 3, 1, 2).astype(np.uint8))
    np.testing.assert_allclose(ds.mean, (q / 255).mean(axis=(0, 1, 2)), rtol=0, atol=1e-12)
    np.testing.assert_allclose(ds.std, (q / 255).std(axis=(0, 1, 2), ddof=1), rtol=0, atol=1e-12)
    assert ds.num_classes == 4 and ds.classes == ("east", "north", "west", "south")
    assert np.array_equal(np.bincount(ds.y_train.numpy()), [128] * 4) and ds.y_train.dtype == torch.int64
    assert ds.extra == {"seed": 0, "noise": 0.1}


def test_the_dataset_reads_its_options_from_the_run() -> None:
    cfg = make_config(algorithm="dec-sl", dataset="blobs", blobs_train=64, blobs_noise=0.0)
    ds = load_dataset("blobs", cfg=cfg)
    assert ds.x_train.shape == (64, 3, 16, 16) and ds.x_test.shape == (16, 3, 16, 16) and ds.extra["noise"] == 0.0
    with pytest.raises(ConfigError, match=r"^--blobs-noise: must lie in \[0, 1\]"):
        make_config(algorithm="dec-sl", dataset="blobs", blobs_noise=2.0)
    with pytest.raises(ValueError, match="synthetic dataset only, not 'blobs'"):
        load_dataset("blobs", num_train=10)


def test_what_a_dataset_gives_is_checked_in_one_line() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (6, 1, 8, 8), dtype=np.uint8)
    y = np.array([0, 1, 2, 0, 1, 2])
    ds = assemble("mine", Arrays(x, y, x[:2], y[:2], mean=(0.5,), std=(0.25,)))
    assert ds.num_classes == 3 and ds.classes == ("0", "1", "2") and ds.mean == (0.5,) and ds.std == (0.25,)
    assert torch.equal(assemble("mine", Arrays(x[:, 0], y, x[:2, 0], y[:2])).x_train, torch.from_numpy(x))
    bad = {
        "float images must lie in [0, 1]": Arrays(x * 2.0, y, x[:2], y[:2]),
        "labels must lie in [0, 3)": Arrays(x, y, x[:2], y[:2] + 2, num_classes=3),
        "must be square images": Arrays(x[:, :, :, :4], y, x[:2, :, :, :4], y[:2]),
        "must be 6 integer labels": Arrays(x, y[:5], x[:2], y[:2]),
        "give both mean and std": Arrays(x, y, x[:2], y[:2], mean=(0.5,)),
        "train images are (1, 8, 8), test images (3, 8, 8)": Arrays(x, y, np.repeat(x[:2], 3, axis=1), y[:2]),
    }
    for message, arrays in bad.items():
        with pytest.raises(ValueError) as e:
            assemble("mine", arrays)
        assert str(e.value).startswith("--dataset mine: ") and message in str(e.value) and "\n" not in str(e.value)


# ------------------------------------------------------------------ the model

def _parameters(c: int, w: int) -> int:
    """Stem 3x3 (9Cw), two depthwise 3x3 (9w, 18w), two pointwise (2w², 8w²), three affine norms (2w, 4w, 8w)."""
    return 9 * c * w + 10 * w * w + 41 * w


@pytest.mark.parametrize("norm", ["batch", "group"])
@pytest.mark.parametrize("c,s", [(1, 28), (3, 16)])
def test_model_output_shape_and_feature_dimension(norm: str, c: int, s: int) -> None:
    cfg = make_config(algorithm="dec-sl", model="sep-cnn", sep_width=8, sep_norm=norm)
    enc = build_encoder("sep-cnn", c, s, cfg=cfg)
    assert enc.feat_dim == 32 and count_parameters(enc) == _parameters(c, 8)
    out = enc(torch.randn(5, c, s, s))
    assert out.shape == (5, 32) and torch.isfinite(out).all()
    default = build_encoder("sep-cnn", c, s)  # outside a run: the options' defaults (width 16)
    assert default.feat_dim == 64 and count_parameters(default) == _parameters(c, 16)
    with pytest.raises(ValueError, match="does not take option"):
        build_encoder("sep-cnn", c, s, depth=3)


def test_model_choices_come_from_the_registry_and_keep_hf_paths() -> None:
    with pytest.raises(ConfigError) as e:
        make_config(model="no-such-model")
    assert "sep-cnn" in str(e.value) and "simple-cnn" in str(e.value) and "hf:PATH" in str(e.value)
    assert make_config(model="hf:/some/local/dir").model == "hf:/some/local/dir"
    with pytest.raises(ValueError, match="unknown encoder"):
        build_encoder("no-such-model", 3, 32)


def test_batch_norm_stacks_peers_and_group_norm_says_why_not() -> None:
    """With BatchNorm the peer-stacked forward of 3 peers is each peer's own (depthwise convolutions grouped
    per peer); GroupNorm (statistics across channels) is named as what prevents stacking."""
    torch.manual_seed(0)
    alone = [build_encoder("sep-cnn", 3, 16).double() for _ in range(3)]
    assert why_not_stackable(alone[0]) is None
    stack = PeerStack(alone)
    x = torch.randn(3, 4, 3, 16, 16, dtype=torch.float64)
    out = functional_call(peer_stacked(alone[0]), stack.prefix(3), (fold(x),))
    for i, model in enumerate(alone):
        torch.testing.assert_close(unfold(out, 3)[i], model(x[i]), rtol=1e-10, atol=1e-12)
    group = make_config(algorithm="dec-sl", model="sep-cnn", sep_norm="group")
    reason = why_not_stackable(build_encoder("sep-cnn", 3, 16, cfg=group))
    assert reason is not None and "GroupNorm" in reason


def test_batch_peers_uses_the_model_or_records_why_not(tmp_path: Path, capsys) -> None:
    small = {"algorithm": "dec-sl", "dataset": "blobs", "blobs_train": 64, "model": "sep-cnn", "sep_width": 4,
             "peers": 2}
    on = setup_algorithm(tmp_path / "on", batch_peers="on", **small)
    assert on.batched is not None and on.ctx.manifest_extra["batch_peers"]["ranks"][0]["batched"]
    # auto on a CPU: not among the models measured faster stacked there (the capability cpu-stacked-faster)
    auto = setup_algorithm(tmp_path / "auto", device="cpu", **small)
    assert auto.batched is None and "peer by peer" in auto.ctx.manifest_extra["batch_peers"]["ranks"][0]["why"]
    grouped = setup_algorithm(tmp_path / "group", sep_norm="group", **small)
    verdict = grouped.ctx.manifest_extra["batch_peers"]["ranks"][0]
    assert grouped.batched is None and not verdict["batched"] and "GroupNorm" in verdict["why"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        setup_algorithm(tmp_path / "refused", sep_norm="group", batch_peers="on", **small)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--batch-peers on: --model sep-cnn cannot run peer-stacked" in err and "GroupNorm" in err


# ------------------------------------------------------------------ both, in a run

def test_both_plugins_run_through_simulate(tmp_path: Path) -> None:
    from p2pfl.simulation import simulate

    run = simulate(plugins=[DATASET, MODEL], algorithm="dec-sl", dataset="blobs", blobs_train=128, model="sep-cnn",
                   sep_width=4, peers=4, rounds=2, local_steps=2, batch_size=8, eval_every=1, probe_epochs=1,
                   batch_peers="on", out=str(tmp_path), progress=False, plots=False)
    manifest = run.manifest
    assert manifest["dataset"] == {"name": "blobs", "train": 128, "test": 32, "scored_on": "test", "seed": 0,
                                   "noise": 0.1}
    assert manifest["model"]["name"] == "sep-cnn"
    assert manifest["batch_peers"]["ranks"][0]["batched"]
    assert sum(manifest["partition"]["sizes"]) == 128 and manifest["partition"]["classes"] == ["east", "north",
                                                                                               "west", "south"]
    assert 0.0 <= run.summary["final"]["test_acc_avg"] <= 1.0
