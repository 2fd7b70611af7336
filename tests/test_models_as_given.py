"""Models as given (issue 56): `--head linear` trains exactly the plug-in encoder and one Linear classifier, the
manifest counts the encoder's and the head's parameters apart, moon refuses a head without its projection, and a
plug-in model with a wrong Linear size is refused in one line at set-up naming its file and line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import run_job

LENET = '''import torch
from torch import nn

from p2pfl.models.encoders import MODELS, Model


class LeNet(nn.Module):
    def __init__(self, c: int, extra: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(c, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                                  nn.MaxPool2d(2), nn.Flatten())
        self.fc = nn.Linear(16 * 5 * 5 + extra, 84)
        self.feat_dim = 84

    def forward(self, x):
        return torch.relu(self.fc(self.conv(x)))


@MODELS.register("lenet")
class LeNetModel(Model):
    def build(self, in_channels: int, image_size: int) -> nn.Module:
        return LeNet(in_channels, 0)


@MODELS.register("lenet-wrong")
class WrongModel(Model):
    def build(self, in_channels: int, image_size: int) -> nn.Module:
        return LeNet(in_channels, 7)  # a Linear sized for 407 inputs where the convolutions give 400
'''
RUN = ["--algorithm", "fedavg", "--dataset", "synthetic", "--peers", "2", "--rounds", "1", "--no-progress",
       "--no-plots"]
#: synthetic: 3×32×32 images of 10 classes.
CHANNELS, CLASSES = 3, 10


def lenet_parameters(channels: int) -> int:
    """The plug-in LeNet's parameters by its layers' closed forms (weights + biases)."""
    conv1 = channels * 6 * 5 * 5 + 6
    conv2 = 6 * 16 * 5 * 5 + 16
    fc = 400 * 84 + 84
    return conv1 + conv2 + fc


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("plugin") / "lenet.py"
    path.write_text(LENET)
    return path


def _model_record(plugin: Path, out: Path, head: str) -> tuple[dict, Path]:
    done = run_job(["-m", "p2pfl.run", "--plugin", str(plugin), "--model", "lenet", "--head", head, *RUN,
                    "--out", str(out), "--name", head, "--checkpoint-every", "1"], ranks=0)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads((out / head / "manifest.json").read_text())["model"], out / head


def test_head_linear_trains_the_encoder_and_one_linear_only(plugin: Path, tmp_path: Path) -> None:
    record, run = _model_record(plugin, tmp_path, "linear")
    encoder = lenet_parameters(CHANNELS)
    head = 84 * CLASSES + CLASSES
    assert record["encoder_parameters"] == encoder
    assert record["head_parameters"] == head
    assert record["parameters"] == encoder + head
    state = torch.load(next((run / "checkpoint").glob("peer-0*")), weights_only=True)["state"]
    names = {k.split("model.", 1)[1] for k in _tensors(state) if "model." in k and "optim" not in k}
    assert names and {n.split(".")[0] for n in names} == {"encoder", "classifier"}, names


def _tensors(state: object, prefix: str = "") -> list[str]:
    """The dotted names of every tensor in a nested checkpoint state."""
    if isinstance(state, torch.Tensor):
        return [prefix]
    if isinstance(state, dict):
        return [n for k, v in state.items() for n in _tensors(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(state, (list, tuple)):
        return [n for i, v in enumerate(state) for n in _tensors(v, f"{prefix}.{i}")]
    return []


def test_head_moon_adds_moon_s_projection_and_its_classifier(plugin: Path, tmp_path: Path) -> None:
    record, _ = _model_record(plugin, tmp_path, "moon")
    projection = (84 * 84 + 84) + (84 * 256 + 256)  # MoonHead: Linear(feat, feat), ReLU, Linear(feat, 256)
    assert record["encoder_parameters"] == lenet_parameters(CHANNELS)
    assert record["head_parameters"] == projection + 256 * CLASSES + CLASSES


def test_moon_refuses_a_head_without_its_projection(tmp_path: Path) -> None:
    done = run_job(["-m", "p2pfl.run", *RUN, "--algorithm", "moon", "--head", "linear", "--out", str(tmp_path)],
                   ranks=0)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("p2pfl: error: --head linear: moon's contrastive term")


def test_a_plugin_model_with_a_wrong_linear_is_one_line_at_set_up(plugin: Path, tmp_path: Path) -> None:
    done = run_job(["-m", "p2pfl.run", "--plugin", str(plugin), "--model", "lenet-wrong", *RUN, "--out",
                    str(tmp_path), "--name", "wrong"], ranks=0)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("p2pfl: error: --model lenet-wrong: fails on one batch of shape (2, 3, 32, 32)"), line
    assert "(2x400 and 407x84)" in line and f"at {plugin}:" in line and "(in forward)" in line, line
    records = tmp_path / "wrong" / "metrics.jsonl"
    assert not records.is_file() or '"type": "round"' not in records.read_text()  # refused before training
