"""--log tensorboard,wandb: real runs' TensorBoard event files and W&B offline runs, read back with TensorBoard's own
reader and a reader of W&B's record log here, hold exactly metrics.jsonl's numbers (read independently below), the
resolved configuration and the plots; a tracker that fails never fails the run nor changes metrics.jsonl."""
from __future__ import annotations

import json
import math
import struct
import zlib
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from p2pfl.cli import parse_args
from p2pfl.config import ConfigError, log_names
from p2pfl.run import main
from p2pfl.runtime import loggers
from p2pfl.runtime.loggers import Loggers, TensorBoardLogger, WandbLogger

from conftest import run_job
from golden_cases import normalise

pytest.importorskip("tensorboard")
pytest.importorskip("wandb")

#: A learner with its loss, evaluations and the simulated clock's keys, plots drawn; and an asynchronous consensus
#: run whose records are summarised (per-peer fields as statistics: 4 peers > --peer-records 2).
LEARNER = ["--algorithm", "fedprox", "--dataset", "synthetic", "--peers", "4", "--rounds", "2", "--eval-every", "1",
           "--local-steps", "1", "--train-subset", "128", "--batch-size", "16", "--compute-time", "1", "--no-progress"]
SUMMARISED = ["--algorithm", "consensus", "--peers", "4", "--vector-size", "50", "--compute-time", "1", "--latency",
              "0.1", "--mode", "async", "--updates", "12", "--eval-every-s", "1.5", "--peer-records", "2",
              "--no-progress", "--no-plots"]
CASES = {"learner": LEARNER, "summarised": SUMMARISED}


def run(argv: list[str], out: Path, name: str) -> Path:
    assert main([*argv, "--out", str(out), "--name", name]) == 0
    return out / name


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each case run with both trackers (W&B's mode left to us: WANDB_MODE unset)."""
    out = tmp_path_factory.mktemp("logged")
    with pytest.MonkeyPatch.context() as env:
        env.delenv("WANDB_MODE", raising=False)
        return {case: run([*argv, "--log", "tensorboard,wandb"], out, case) for case, argv in CASES.items()}


# ------------------------------------------------------------------------------- the expectation, from the files

def per_peer(value: dict) -> bool:
    return bool(value) and all(key.isdigit() for key in value)


def numbers_of(record: dict) -> dict[str, float]:
    """Every number of a metrics.jsonl record (bools, the round and per-peer maps aside), by its key path."""
    out = {}
    stack = [(f"{record['type']}/{key}", value) for key, value in record.items() if key not in ("type", "round")]
    while stack:
        path, value = stack.pop()
        if type(value) in (int, float):
            out[path] = float(value)
        elif type(value) is dict and not per_peer(value):
            stack += [(f"{path}/{key}", item) for key, item in value.items()]
    return out


def expected_series(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        for tag, value in numbers_of(record).items():
            series[tag].append((record["round"], value))
    return {tag: sorted(points) for tag, points in series.items()}


def config_of(run_dir: Path) -> dict[str, Any]:
    return yaml.safe_load((run_dir / "config.yaml").read_text())


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def assert_same_series(got: dict[str, list[tuple[int, float]]], want: dict[str, list[tuple[int, float]]],
                       cast: Any = float) -> None:
    assert sorted(got) == sorted(want)
    for tag in want:
        steps = [s for s, _ in got[tag]]
        assert steps == [s for s, _ in want[tag]], tag
        assert all(same(float(cast(g)), float(cast(w))) for (_, g), (_, w) in zip(got[tag], want[tag])), tag


# ------------------------------------------------------------------------------------------------------ TensorBoard

def tensorboard_of(run_dir: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "images": 0})
    accumulator.Reload()
    return accumulator


def tensorboard_series(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    accumulator = tensorboard_of(run_dir)
    return {tag: sorted((e.step, e.value) for e in accumulator.Scalars(tag)) for tag in accumulator.Tags()["scalars"]}


@pytest.mark.parametrize("case", CASES)
def test_tensorboard_holds_exactly_the_records_numbers(runs: dict[str, Path], case: str) -> None:
    want = expected_series(runs[case])
    assert_same_series(tensorboard_series(runs[case]), want, cast=np.float32)  # event files hold float32
    keys = {"round/consensus_distance", "round/bytes_sent", "round/sim_time_s", "round/network/links",
            "eval/sim_time_s"}
    keys |= ({"round/loss_mean", "eval/metrics/test_acc_avg"} if case == "learner" else
             {"round/bytes_sent_per_peer_stats/mean", "round/active_count", "round/sim_round_s"})
    assert keys <= set(want)  # the expectation is not vacuous


@pytest.mark.parametrize("case", CASES)
def test_tensorboard_holds_the_configuration_as_hyperparameters(runs: dict[str, Path], case: str) -> None:
    from tensorboard.plugins.hparams import metadata

    content = tensorboard_of(runs[case]).PluginTagToContent(metadata.PLUGIN_NAME)
    session = metadata.parse_session_start_info_plugin_data(content[metadata.SESSION_START_INFO_TAG])
    got = {key: getattr(value, value.WhichOneof("kind")) for key, value in session.hparams.items()}
    want = {key: "none" if value is None else ",".join(value) if isinstance(value, list) else value
            for key, value in config_of(runs[case]).items()}
    assert got == want and got["log"] == "tensorboard,wandb"
    assert {type(got[key]) for key, value in want.items() if isinstance(value, bool)} == {bool}


def test_tensorboard_holds_the_plots_as_they_are(runs: dict[str, Path]) -> None:
    run_dir = runs["learner"]
    accumulator = tensorboard_of(run_dir)
    plots = sorted((run_dir / "plots").glob("*.png"))
    assert plots and sorted(accumulator.Tags()["images"]) == sorted(f"plots/{p.stem}" for p in plots)
    for path in plots:
        (image,) = accumulator.Images(f"plots/{path.stem}")
        assert image.encoded_image_string == path.read_bytes() and image.step == 2  # the last round


def test_a_resumed_run_purges_what_followed_its_checkpoint(tmp_path: Path) -> None:
    """A run that failed in round 4 after its checkpoint of round 2 had mirrored round 3; resumed, its event files
    hold round 3 once, as metrics.jsonl (truncated to the checkpoint) does: the new attempt's (its timings
    differ)."""
    argv = [*LEARNER, "--no-plots", "--rounds", "4", "--checkpoint-every", "2", "--log", "tensorboard"]
    with pytest.raises(SystemExit):
        main([*argv, "--fault", "raise@0:4", "--out", str(tmp_path), "--name", "run"])
    run_dir = tmp_path / "run"
    first = [value for step, value in tensorboard_series(run_dir)["round/elapsed_s"] if step == 3]
    assert len(first) == 1
    assert main([*argv, "--resume", str(run_dir)]) == 0
    want = expected_series(run_dir)
    assert_same_series(tensorboard_series(run_dir), want, cast=np.float32)
    elapsed = want["round/elapsed_s"]
    assert [s for s, _ in elapsed] == [0, 1, 2, 3, 4] and np.float32(elapsed[3][1]) != first[0]


# ------------------------------------------------------------------------------------------------------------- W&B

def wandb_records(run_dir: Path) -> list[Any]:
    """The records of the one offline run in <run>/wandb: W&B's record log (leveldb's log format: a 7-byte file
    header, 32 KiB blocks of chunks with a CRC-32 of their type and data) of wandb_internal_pb2.Record."""
    from wandb.proto.wandb_internal_pb2 import Record

    (path,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, pending, pos, block = [], b"", 7, 1 << 15
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            break
        chunk = data[pos + 7:pos + 7 + length]
        assert zlib.crc32(bytes([kind]) + chunk) == crc
        pos, pending = pos + 7 + length, pending + chunk
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def wandb_history(records: list[Any]) -> dict[str, list[tuple[int, Any]]]:
    series: dict[str, list[tuple[int, Any]]] = defaultdict(list)
    for record in records:
        if record.WhichOneof("record_type") == "history":
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                series[key].append((record.history.step.num, json.loads(item.value_json)))
    return series


@pytest.mark.parametrize("case", CASES)
def test_wandb_offline_run_holds_exactly_the_records_numbers_and_the_configuration(runs: dict[str, Path],
                                                                                     case: str) -> None:
    records = wandb_records(runs[case])
    history = wandb_history(records)
    got = {key: sorted(points) for key, points in history.items() if not key.startswith(("_", "plots/"))}
    assert_same_series(got, expected_series(runs[case]))  # full float64 precision
    config = {}
    for record in records:
        kind = record.WhichOneof("record_type")
        updates = record.run.config.update if kind == "run" else record.config.update if kind == "config" else []
        config.update({item.key: json.loads(item.value_json) for item in updates if item.key != "_wandb"})
    assert config == config_of(runs[case])
    plots = sorted((runs[case] / "plots").glob("*.png"))
    images = {key.removesuffix("/path"): points for key, points in history.items()
              if key.startswith("plots/") and key.endswith("/path")}
    assert sorted(images) == [f"plots/{p.stem}" for p in plots]
    (files,) = (runs[case] / "wandb").glob("offline-run-*/files")
    for path in plots:
        ((step, saved),) = images[f"plots/{path.stem}"]
        assert step == 2 and (files / saved).read_bytes() == path.read_bytes()


def test_wandb_respects_a_mode_the_user_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """WANDB_MODE=disabled: no run is written, and that is no failure."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    warnings: list[str] = []
    trackers = Loggers(["wandb"], tmp_path, {"seed": 0}, warn=warnings.append)
    trackers.record({"type": "round", "round": 0, "consensus_distance": 1.0})
    trackers.close()
    assert warnings == [] and not list((tmp_path / "wandb").glob("offline-run-*"))


@pytest.mark.mpi
def test_under_mpirun_rank_0_alone_writes_the_trackers(runs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two ranks: one event file and one W&B run, holding the records rank 0 gathered, and no warning."""
    monkeypatch.delenv("WANDB_MODE", raising=False)
    argv = [a for a in SUMMARISED if a not in ("--mode", "async", "--updates", "12", "--eval-every-s", "1.5")]
    proc = run_job(["-m", "p2pfl.run", *argv, "--rounds", "3", "--log", "tensorboard,wandb", "--out", str(runs_dir),
                    "--name", "mpi"], ranks=2)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "warning" not in proc.stdout + proc.stderr
    run_dir = runs_dir / "mpi"
    assert len(list((run_dir / "tensorboard").iterdir())) == 1
    want = expected_series(run_dir)
    assert_same_series(tensorboard_series(run_dir), want, cast=np.float32)
    assert_same_series({key: sorted(points) for key, points in wandb_history(wandb_records(run_dir)).items()
                        if not key.startswith("_")}, want)


# --------------------------------------------------------------------------------------------- failing trackers

@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """metrics.jsonl of the learner run without trackers (timings aside)."""
    return normalise(run([*LEARNER, "--no-plots"], tmp_path_factory.mktemp("plain"), "plain") / "metrics.jsonl")


def fail_on_call(n: int):
    """A method that raises from its n-th call on."""
    calls = []

    def broken(*args: Any, **kwargs: Any) -> None:
        calls.append(1)
        if len(calls) >= n:
            raise RuntimeError("tracker broke\non two lines")
    return broken


BROKEN = {"tensorboard-start": ("tensorboard", TensorBoardLogger, "__init__", 1, "not started"),
          "wandb-init": ("wandb", None, "init", 1, "not started"),
          "tensorboard-log": ("tensorboard", TensorBoardLogger, "scalars", 3, "failed to log a record"),
          "wandb-log": ("wandb", WandbLogger, "scalars", 2, "failed to log a record"),
          "tensorboard-close": ("tensorboard", TensorBoardLogger, "close", 1, "failed to close")}


@pytest.mark.parametrize("case", BROKEN)
def test_a_failing_tracker_is_one_warning_and_changes_nothing(case: str, plain: list[dict], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    name, owner, method, n, what = BROKEN[case]
    if owner is None:
        import wandb
        owner = wandb
    monkeypatch.setattr(owner, method, fail_on_call(n))
    run_dir = run([*LEARNER, "--no-plots", "--log", name], tmp_path, "run")
    out = capsys.readouterr()
    warnings = [line for line in (out.out + out.err).splitlines() if "warning" in line]
    assert len(warnings) == 1 and warnings[0].startswith(f"p2pfl: warning: --log {name}: ") and what in warnings[0]
    assert "RuntimeError: tracker broke on two lines" in warnings[0], warnings
    assert normalise(run_dir / "metrics.jsonl") == plain


def test_a_missing_package_or_an_unwritable_folder_is_one_warning(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "wandb", None)  # `import wandb` raises ImportError
    (tmp_path / loggers.TENSORBOARD_DIR).write_text("a file where the folder goes")
    warnings: list[str] = []
    trackers = Loggers(["tensorboard", "wandb"], tmp_path, {"seed": 0}, warn=warnings.append)
    trackers.record({"type": "round", "round": 0, "consensus_distance": 1.0})
    trackers.close()
    assert [w.split(":")[0] for w in warnings] == ["--log tensorboard", "--log wandb"]
    assert "ModuleNotFoundError" in warnings[1] and all("\n" not in w and "not started" in w for w in warnings)


# ---------------------------------------------------------------------------------------------------- the option

@pytest.mark.parametrize("value,names", [("tensorboard", ["tensorboard"]), ("wandb, tensorboard,wandb",
                                                                            ["wandb", "tensorboard"]),
                                         ("none", [])])
def test_log_takes_comma_separated_trackers_from_flags_and_yaml(value: str, names: list[str], tmp_path: Path) -> None:
    cfg, _ = parse_args(["--log", value])
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"log": value}))
    from_yaml, _ = parse_args(["--config", str(path)])
    assert log_names(cfg.log) == log_names(from_yaml.log) == names


@pytest.mark.parametrize("argv", [["--log", "tensorboard,mlflow"], ["--log", ""], ["--log", "wandb,"],
                                  ["--log", "TensorBoard"], ["--log"]])
def test_a_bad_log_value_is_one_line_and_exit_2(argv: list[str], tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--peers", "4", *argv, "--out", str(tmp_path)])
    assert stop.value.code == 2 and not any(tmp_path.iterdir())
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("p2pfl: error: --log: "), err


def test_a_yaml_list_is_refused_naming_log(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("log: [tensorboard]\n")
    with pytest.raises(ConfigError, match="^--log: "):
        parse_args(["--config", str(path)])
