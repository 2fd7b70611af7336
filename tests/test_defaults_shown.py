"""The defaults in sight (issue 56 item 5): rank 0's start banner and summary.json's `run_setup` name the dataset
and its classes, the partition with where its value came from, the model's parameters (encoder and head, as the
manifest records them), the augmentation and the chance level; a dataset of one's own files takes the IID partition
when none is given (recorded in config.yaml, and resumed as recorded); a final accuracy at chance is warned of,
naming the budget; --print-config and --help METHOD mark the values the method sets.
"""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from p2pfl.cli_help import method_defaults
from p2pfl.config import (
    DATA_DEFAULT,
    OWN_DATA_PARTITION,
    RECORDED,
    RunConfig,
    _as_written,
    _flag,
    data_defaults,
    make_config,
)
from p2pfl.records import RunSetup
from p2pfl.run import main
from p2pfl.runtime.banner import chance_warning

from conftest import run_job

CLASSES = 4


def _own_npz(path: Path) -> Path:
    """A 4-class npz whose test images are all the same picture: every model predicts one class for all of them,
    so on the balanced test set any model scores exactly chance, 1/4 (training images vary, so std > 0)."""
    rng = np.random.default_rng(0)
    y = np.arange(64) % CLASSES
    x = rng.integers(0, 255, (64, 16, 16), dtype=np.uint8)
    x_test = np.full((16, 16, 16), 100, dtype=np.uint8)
    np.savez(path, x_train=x, y_train=y, x_test=x_test, y_test=np.arange(16) % CLASSES)
    return path


RUN = ["--algorithm", "fedavg", "--peers", "4", "--local-steps", "1", "--batch-size", "8",
       "--eval-every", "0", "--zeta2-batch", "0", "--no-progress", "--no-plots"]


@pytest.fixture(scope="module")
def own_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """One fedavg run on own npz data, no --partition given: its folder, stdout and stderr."""
    tmp = tmp_path_factory.mktemp("own")
    data = _own_npz(tmp / "d.npz")
    proc = run_job(["-m", "p2pfl.run", *RUN, "--rounds", "2", "--dataset", f"npz:{data}", "--checkpoint-every", "2",
                    "--out", str(tmp / "runs"), "--name", "own"], ranks=0)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp / "runs" / "own", proc.stdout, proc.stderr


def test_the_banner_names_data_partition_model_and_chance(own_run: tuple[Path, str, str]) -> None:
    run_dir, out, _ = own_run
    manifest = json.loads((run_dir / "manifest.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    (data,) = [line for line in out.splitlines() if line.startswith("  data: ")]
    dataset = manifest["config"]["dataset"]
    assert data.startswith(f"  data: {dataset} ({CLASSES} classes); partition iid (default for own data); "
                           "augment crop+flip"), data
    assert len(manifest["partition"]["classes"]) == CLASSES
    (model_line,) = [line for line in out.splitlines() if line.startswith("  model: ")]
    model = manifest["model"]
    assert model["encoder_parameters"] + model["head_parameters"] == model["parameters"]
    assert model_line == (f"  model: {model['name']}, {model['parameters']:,} parameters (encoder "
                          f"{model['encoder_parameters']:,} + head {model['head_parameters']:,}); chance accuracy "
                          f"{1 / CLASSES:.3f}")
    assert summary["run_setup"] == RunSetup(
        dataset=dataset, classes=CLASSES, partition="iid", partition_source=DATA_DEFAULT, model=model["name"],
        parameters=model["parameters"], encoder_parameters=model["encoder_parameters"],
        head_parameters=model["head_parameters"], augment="crop+flip", chance=1 / CLASSES)
    # the banner comes before the first round's progress and after the run folder's line
    lines = out.splitlines()
    assert lines.index(data) > next(i for i, line in enumerate(lines) if "run folder" in line)


def test_own_data_defaults_to_iid_recorded_in_config_yaml(own_run: tuple[Path, str, str]) -> None:
    run_dir, _, _ = own_run
    text = (run_dir / "config.yaml").read_text()
    assert f"\npartition: {OWN_DATA_PARTITION}  # {DATA_DEFAULT}\n" in text
    assert json.loads((run_dir / "manifest.json").read_text())["partition"]["kind"] == OWN_DATA_PARTITION


def test_a_run_at_chance_is_warned_of_naming_its_budget(own_run: tuple[Path, str, str]) -> None:
    run_dir, _, err = own_run
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["final"]["test_acc_avg"] == pytest.approx(1 / CLASSES)
    (warning,) = summary["warnings"]
    assert "the model is at chance" in warning and "2 rounds" in warning and "1 local step(s)" in warning
    assert "lr 0.01 (method default)" in warning
    assert f"p2pfl: warning: {warning}" in err.splitlines()


def test_a_resume_keeps_the_recorded_partition(own_run: tuple[Path, str, str], tmp_path: Path) -> None:
    """The same command resumed (no --partition) resolves the partition config.yaml holds; a run recorded with
    another partition (an older run's core default) resumes with it, not with the own-data default."""
    run_dir, _, _ = own_run
    manifest = json.loads((run_dir / "manifest.json").read_text())
    dataset = manifest["config"]["dataset"]
    cfg = make_config(algorithm="fedavg", dataset=dataset, rounds=3, resume=str(run_dir))
    assert cfg.partition == OWN_DATA_PARTITION and cfg.source("partition") == RECORDED  # whatever chose it then
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    proc = run_job(["-m", "p2pfl.run", *RUN, "--rounds", "3", "--dataset", dataset, "--resume", str(copy)], ranks=0)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"\npartition: {OWN_DATA_PARTITION}  # {RECORDED}\n" in (copy / "config.yaml").read_text()
    assert json.loads((copy / "summary.json").read_text())["rounds"] == 3
    older = tmp_path / "older"
    older.mkdir()
    (older / "config.yaml").write_text((run_dir / "config.yaml").read_text().replace(
        f"partition: {OWN_DATA_PARTITION}  # {DATA_DEFAULT}", "partition: dirichlet"))
    base = make_config(algorithm="fedavg", dataset=dataset)
    assert data_defaults(dataclasses.replace(base, resume=str(older)), {"dataset", "resume"}) == {
        "partition": "dirichlet"}


def test_builtin_data_keeps_the_core_default_and_given_values_are_given(tmp_path: Path) -> None:
    core = RunConfig.__dataclass_fields__["partition"].default
    for dataset in ("synthetic", "fashion-mnist"):
        cfg = make_config(algorithm="fedavg", dataset=dataset)
        assert cfg.partition == core and cfg.source("partition") == "core default" and cfg.from_data == ()
    data = f"npz:{_own_npz(tmp_path / 'd.npz')}"
    assert make_config(algorithm="fedavg", dataset=data, partition="dirichlet").source("partition") == "given"
    alpha = make_config(algorithm="fedavg", dataset=data, alpha=0.5)  # a Dirichlet option: Dirichlet it is
    assert alpha.partition == core and alpha.source("partition") == "core default"
    assert make_config(algorithm="fedavg", dataset=data).source("lr") == "method default"


def test_the_chance_warning_holds_within_one_point() -> None:
    cfg = make_config(algorithm="fedavg", dataset="synthetic", rounds=3)
    setup = RunSetup(dataset="synthetic", classes=10, partition="iid", partition_source="given", model="simple-cnn",
                     parameters=1, encoder_parameters=None, head_parameters=None, augment="crop+flip", chance=0.1)
    assert chance_warning(cfg, setup, {"test_acc_avg": 0.109, "test_acc_peer_mean": 0.08}) is not None
    assert chance_warning(cfg, setup, {"test_acc_avg": 0.111, "test_acc_peer_mean": 0.08}) is None
    assert chance_warning(cfg, setup, {"distance_to_mean": 0.1}) is None
    assert chance_warning(cfg, {**setup, "chance": None}, {"test_acc_avg": 0.1}) is None


def test_print_config_marks_the_methods_values(capsys: pytest.CaptureFixture) -> None:
    own = method_defaults("fedavg")
    given = next(iter(own))
    value = {"optimizer": "adam", "lr": 0.05, "momentum": 0.5, "weight_decay": 0.0, "batch_size": 32}[given]
    assert main(["--print-config", "--algorithm", "fedavg", f"--{given.replace('_', '-')}", str(value)]) == 0
    lines = {line.split(":", 1)[0]: line for line in capsys.readouterr().out.splitlines()}
    for name in own:
        marked = lines[name].endswith("  # fedavg's default")
        assert marked == (name != given), lines[name]
    assert lines["rounds"] == "rounds: 10" and "#" not in lines["partition"]  # core defaults: unmarked


def test_help_method_marks_the_methods_values(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["--help", "fedavg"])
    text = "".join(capsys.readouterr().out.split())  # the wrapping aside
    core = {f: RunConfig.__dataclass_fields__[f].default for f in method_defaults("fedavg")}
    for name, value in method_defaults("fedavg").items():
        shown = f"{_flag(name)} {_as_written(value)} (fedavg's; core: {_as_written(core[name])})"
        assert "".join(shown.split()) in text, shown
    assert re.search(r"sets,whenleftunset", text)
