"""--log tensorboard,wandb: real runs' TensorBoard event files and W&B offline runs, read back with TensorBoard's own
reader and a reader of W&B's record log here, hold exactly the tags written out below (grouped train/, eval/,
comm/, time/, network/, each peer's own under peers/ with --log-peers; no bookkeeping) with metrics.jsonl's numbers
at the key each tag names, the resolved configuration and the plots; a study's point is a W&B run grouped by its
study; a tracker that fails never fails the run nor changes metrics.jsonl."""
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

#: A learner with its loss, evaluations and the simulated clock's keys, plots drawn, each peer's curves logged;
#: and an asynchronous consensus run whose records are summarised (per-peer fields as statistics: 4 peers >
#: --peer-records 2).
LEARNER = ["--algorithm", "fedprox", "--dataset", "synthetic", "--peers", "4", "--rounds", "2", "--eval-every", "1",
           "--local-steps", "1", "--train-subset", "128", "--batch-size", "16", "--compute-time", "1", "--no-progress"]
SUMMARISED = ["--algorithm", "consensus", "--peers", "4", "--vector-size", "50", "--compute-time", "1", "--latency",
              "0.1", "--mode", "async", "--updates", "12", "--eval-every-s", "1.5", "--peer-records", "2",
              "--no-progress", "--no-plots"]
CASES = {"learner": [*LEARNER, "--log-peers"], "summarised": SUMMARISED}

# ------------------------------------------------------------------------------------------- the tags, written out
# Each tag with where its number sits in metrics.jsonl: the record's type and the key path (a peer's own: its id).

def _round(*path: str) -> tuple[str, tuple[str, ...]]:
    return "round", path


def _eval(*path: str) -> tuple[str, tuple[str, ...]]:
    return "eval", path


TIMES = {f"time/{key}": _round(key) for key in ("elapsed_s", "round_s", "time_comm_s", "time_compute_s",
                                                 "time_local_s", "time_schedule_s", "time_wait_s", "sim_round_s",
                                                 "sim_time_s")}
SHARED = {**TIMES, "train/consensus_distance": _round("consensus_distance"), "comm/bytes_sent": _round("bytes_sent"),
          "comm/bytes_recv": _round("bytes_recv"), "network/links": _round("network", "links"),
          "network/sigma2": _round("network", "sigma2"), "eval/sim_time_s": _eval("sim_time_s")}
PEERS = range(4)
STATS = ("mean", "std", "min", "max", "nonfinite")  # a statistic's `count` of peers is bookkeeping
TAGS = {
    "learner": {
        **SHARED, "train/loss_mean": _round("loss_mean"),
        **{f"eval/{m}": _eval("metrics", m) for m in (
            "test_acc_avg", "zeta2_avg", "test_acc_peer_mean", "test_acc_peer_min", "test_acc_peer_max",
            "drift_to_avg_peer_mean", "drift_to_avg_peer_min", "drift_to_avg_peer_max",
            "drift_to_neighbours_peer_mean", "drift_to_neighbours_peer_min", "drift_to_neighbours_peer_max")},
        **{f"peers/{m}/{p}": _round(m, str(p)) for m in ("loss", "bytes_sent_per_peer", "sim_compute_s",
                                                          "sim_transfer_s", "sim_idle_s") for p in PEERS},
        **{f"peers/degree/{p}": _round("network", "degree", str(p)) for p in PEERS},
        **{f"peers/{m}/{p}": _eval("per_peer", str(p), m) for m in ("test_acc", "drift_to_avg",
                                                                     "drift_to_neighbours") for p in PEERS}},
    "summarised": {
        **SHARED, "network/active_count": _round("active_count"),
        **{f"network/degree_stats/{s}": _round("network", "degree_stats", s) for s in STATS},
        **{f"comm/bytes_sent_per_peer_stats/{s}": _round("bytes_sent_per_peer_stats", s) for s in STATS},
        **{f"eval/{m}": _eval("metrics", m) for m in (
            "mean_shift", "distance_to_initial_mean_peer_mean", "distance_to_initial_mean_peer_min",
            "distance_to_initial_mean_peer_max", "distance_to_mean_peer_mean", "distance_to_mean_peer_min",
            "distance_to_mean_peer_max")},
        **{f"eval/{m}_peer_std": _eval("per_peer_stats", m, "std") for m in ("distance_to_initial_mean",
                                                                             "distance_to_mean")}},
}


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

def expected_series(run_dir: Path, tags: dict[str, tuple[str, tuple[str, ...]]]) -> dict[str, list[tuple[int, float]]]:
    """Each tag's (round, number) from every record of its type that holds its key path."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    series: dict[str, list[tuple[int, float]]] = {}
    for name, (kind, path) in tags.items():
        for record in records:
            value: Any = record if record["type"] == kind else None
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            if type(value) in (int, float):
                series.setdefault(name, []).append((record["round"], float(value)))
    return {name: sorted(points) for name, points in series.items()}


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
def test_tensorboard_holds_exactly_the_tags_written_out_with_the_records_numbers(runs: dict[str, Path],
                                                                                 case: str) -> None:
    want = expected_series(runs[case], TAGS[case])
    assert sorted(want) == sorted(TAGS[case])  # every tag's key is in the records: the expectation is not vacuous
    assert_same_series(tensorboard_series(runs[case]), want, cast=np.float32)  # event files hold float32


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
    first = [value for step, value in tensorboard_series(run_dir)["time/elapsed_s"] if step == 3]
    assert len(first) == 1
    assert main([*argv, "--resume", str(run_dir)]) == 0
    want = expected_series(run_dir, {name: where for name, where in TAGS["learner"].items()
                                     if not name.startswith("peers/")})
    assert_same_series(tensorboard_series(run_dir), want, cast=np.float32)
    elapsed = want["time/elapsed_s"]
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
    assert_same_series(got, expected_series(runs[case], TAGS[case]))  # full float64 precision
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


#: Seconds the W&B service may take to flush an offline run's record log after `finish` returned: it writes from
#: its own process, and on a loaded machine the file was once read before its records (CI, under two workers).
WANDB_FLUSH_S = 30.0


def wandb_run_record(run_dir: Path) -> Any:
    """The run record of the offline run in `run_dir`, waiting up to WANDB_FLUSH_S for the service's flush."""
    import time

    deadline = time.monotonic() + WANDB_FLUSH_S
    while True:
        found = [r.run for r in wandb_records(run_dir) if r.WhichOneof("record_type") == "run"]
        if found or time.monotonic() > deadline:
            assert found, f"no run record in {run_dir / 'wandb'} {WANDB_FLUSH_S:g} s after the run finished"
            return found[0]
        time.sleep(0.5)


def test_a_run_outside_a_study_is_a_wandb_run_of_job_type_run_in_no_group(runs: dict[str, Path]) -> None:
    run = wandb_run_record(runs["summarised"])
    assert (run.run_group, run.job_type, list(run.tags), run.display_name) == ("", "run", [], "summarised")


def test_a_study_point_is_a_wandb_run_grouped_by_its_study_with_its_axes(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A point run as the study runs it (its --config, into STUDY/runs/NAME): group = the study's name, job type
    point, tags axis=label, and its identity beside the options in the config."""
    from p2pfl.study import StudyFolder, expand

    monkeypatch.delenv("WANDB_MODE", raising=False)
    plan = expand({"name": "sweep", "base": {"algorithm": "consensus", "peers": 4, "vector_size": 20, "rounds": 1,
                                             "progress": False, "plots": False, "log": "wandb"},
                   "axes": {"topology": ["cycle", "complete"]}, "seeds": 2})
    folder = StudyFolder(tmp_path / "study")
    folder.write_plan(plan, "")
    point = plan.points[3]
    assert point.axes == {"topology": "complete", "seed": "1"}
    assert main(["--config", str(folder.config(point.name)), "--out", str(folder.path / "runs"),
                 "--name", point.name]) == 0
    run_dir = folder.run_dir(point.name)
    run = wandb_run_record(run_dir)
    assert (run.run_group, run.job_type, sorted(run.tags)) == ("sweep", "point", ["seed=1", "topology=complete"])
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["study"] == {"study": "sweep", "point": point.name, "job_type": "point",
                               "axes": {"topology": "complete", "seed": "1"}}
    assert config["topology"] == "complete" and config["seed"] == 1


def test_a_tuning_point_has_job_type_tuning(tmp_path: Path) -> None:
    plan = {"name": "tuned", "points": [{"name": "final", "axes": {"lr": "best"}}],
            "tuning": [{"name": "try-lr-0.1", "axes": {"lr": "0.1"}}]}
    (tmp_path / "runs").mkdir()
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    tuning = loggers.wandb_options(tmp_path / "runs" / "try-lr-0.1", {"lr": 0.1})
    assert (tuning["group"], tuning["job_type"], tuning["tags"]) == ("tuned", "tuning", ["lr=0.1"])
    assert loggers.wandb_options(tmp_path / "runs" / "final", {})["job_type"] == "point"
    assert loggers.wandb_options(tmp_path / "elsewhere" / "final", {"lr": 1})["config"] == {"lr": 1}


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
    synchronous = {f"time/{m}_stats/{s}": _round(f"{m}_stats", s) for m in ("sim_compute_s", "sim_transfer_s",
                                                                             "sim_idle_s") for s in STATS}
    want = expected_series(run_dir, {**TAGS["summarised"], **synchronous})
    assert sorted(want) == sorted({**TAGS["summarised"], **synchronous})
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
    warnings = [line for line in (out.out + out.err).splitlines() if "warning" in line and "at chance" not in line]
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
