"""analysis.frame on a real study (the study runner, tiny consensus runs: 2 points x 2 seeds, one point's records
summarised by --peer-records), its values checked one by one against each metrics.jsonl read here, record type by
record type, as docs/CONVENTIONS.md lays them out; then a run still in progress and a point never started."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

import analysis
from analysis.runs import load_run
from p2pfl.study.__main__ import main as study_main

PEERS = 4
#: --peer-records 2 < 4 peers: that point's records are summarised; 0 never summarises.
STUDY = {"name": "tiny", "base": {"algorithm": "consensus", "vector_size": 20, "rounds": 2, "peers": PEERS,
                                  "eval_every": 1, "plots": False, "progress": False},
         "axes": {"peer-records": [0, 2]}, "seeds": 2}
AXIS = "peer-records"


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("frame")
    path = root / "study.yaml"
    path.write_text(yaml.safe_dump(STUDY, sort_keys=False))
    assert study_main([str(path), "--out", str(root / "studies"), "--jobs", "2"]) == 0
    return root / "studies" / "tiny"


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _stats(name: str, stats: dict) -> dict:
    return {(f"{name}.{field}", None): v for field, v in stats.items() if v is not None}


def expected_round(record: dict) -> dict:
    """(metric, peer) -> value of a round record, key by key as the conventions describe it."""
    out = {}
    for key, value in record.items():
        if key in ("type", "round", "summarised"):
            continue
        if key == "active":  # the one derived value: how many peers took part, as a summarised record says
            out["active_count", None] = len(value)
        elif key == "network":
            for name, inner in value.items():
                if name == "degree":
                    out.update({("network.degree", int(p)): d for p, d in inner.items()})
                elif name == "degree_stats":
                    out.update(_stats("network.degree_stats", inner))
                elif _number(inner):
                    out["network." + name, None] = inner
        elif key.endswith("_stats"):  # a summarised per-peer field
            out.update(_stats(key, value))
        elif isinstance(value, dict):  # {peer: value}
            out.update({(key, int(p)): v for p, v in value.items()})
        elif _number(value):
            out[key, None] = value
    return out


def expected_eval(record: dict) -> dict:
    """(metric, peer) -> value of an eval record."""
    out = {(name, None): v for name, v in record["metrics"].items()}
    for peer, metrics in record["per_peer"].items():
        out.update({(name, int(peer)): v for name, v in metrics.items() if _number(v)})
    for name, stats in record.get("per_peer_stats", {}).items():
        out.update(_stats(name + "_stats", stats))
    return out


def expected_records(run_dir: Path) -> dict:
    """(round, kind, metric, peer) -> value of every value of the run's metrics.jsonl."""
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        reader = expected_round if record["type"] == "round" else expected_eval
        for (metric, peer), value in reader(record).items():
            key = (record["round"], record["type"], metric, peer)
            assert key not in out, key
            out[key] = value
    return out


def as_dict(records: pd.DataFrame) -> dict:
    out = {}
    for row in records.itertuples(index=False):
        key = (row.round, row.kind, row.metric, None if pd.isna(row.peer) else int(row.peer))
        assert key not in out, key
        out[key] = row.value
    return out


def test_the_records_frame_holds_every_value_of_every_metrics_file(study: Path) -> None:
    frames = analysis.frame(study)
    plan = json.loads((study / "plan.json").read_text())
    assert sorted(frames.records["run"].unique()) == sorted(p["name"] for p in plan["points"])
    for point in plan["points"]:
        run_dir = study / "runs" / point["name"]
        mine = frames.records[frames.records["run"] == point["name"]]
        assert as_dict(mine) == expected_records(run_dir)
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
        assert set(mine["study"]) == {"tiny"} and set(mine[AXIS]) == {int(point["axes"][AXIS])}
        assert set(mine["seed"]) == {config["seed"]} == {int(point["axes"]["seed"])}
        assert mine["round"].max() == 2 and set(mine["kind"]) == {"round", "eval"}


def test_summarised_records_give_statistics_and_no_peer_rows(study: Path) -> None:
    records = analysis.frame(study).records
    summarised, full = records[records[AXIS] == 2], records[records[AXIS] == 0]
    assert summarised["peer"].isna().all()
    stats = summarised[summarised["metric"] == "bytes_sent_per_peer_stats.count"]
    assert len(stats) == 2 * 2 and (stats["value"] == PEERS).all()  # 2 seeds x rounds 1, 2
    per_peer = full[(full["metric"] == "bytes_sent_per_peer") & (full["round"] == 1)]
    assert sorted(per_peer["peer"]) == sorted(list(range(PEERS)) * 2)  # each peer once per seed
    for records_of_a_kind in (summarised, full):  # how many took part: in every finished round, either way
        active = records_of_a_kind[records_of_a_kind["metric"] == "active_count"]
        assert sorted(active["round"]) == [1, 1, 2, 2] and (active["value"] == PEERS).all()
    # the summarised mean is the mean of what the full records hold per peer, for the same seed
    for seed in (0, 1):
        mean = summarised[(summarised["seed"] == seed) & (summarised["round"] == 1)
                          & (summarised["metric"] == "bytes_sent_per_peer_stats.mean")]["value"].item()
        values = per_peer[per_peer["seed"] == seed]["value"]
        assert mean == pytest.approx(values.mean(), rel=1e-12)


def test_the_runs_frame_has_one_row_per_point_and_its_final_metrics(study: Path) -> None:
    runs = analysis.frame(study).runs
    plan = json.loads((study / "plan.json").read_text())
    assert list(runs["run"]) == [p["name"] for p in plan["points"]]
    for row, point in zip(runs.to_dict("records"), plan["points"]):
        run_dir = study / "runs" / point["name"]
        last_eval = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][-1]
        summary = json.loads((run_dir / "summary.json").read_text())
        assert last_eval["type"] == "eval" and last_eval["final"]
        assert {k: row[k] for k in last_eval["metrics"]} == last_eval["metrics"]
        assert row["state"] == "done" and row["rounds_done"] == 2 and row["wall_s"] == summary["wall_s"]
        assert (row["algorithm"], row["topology"], row["peers"], row["rounds"]) == ("consensus", "cycle", PEERS, 2)
        assert row["seed"] == int(point["axes"]["seed"]) and row[AXIS] == int(point["axes"][AXIS])
        config = yaml.safe_load((run_dir / "config.yaml").read_text())  # every option a column, as recorded
        assert {k: row[k] for k in config if k not in ("seed", "plugins")} == {k: v for k, v in config.items()
                                                                              if k not in ("seed", "plugins")}
        assert row["vector_size"] == 20 and row["peer_records"] == int(point["axes"][AXIS])
    assert runs[AXIS].dtype.kind == "i"  # a numeric axis is numbers, not text


def test_a_run_in_progress_and_a_point_never_started(study: Path, tmp_path: Path) -> None:
    copy = tmp_path / "tiny"
    shutil.copytree(study, copy)
    names = [p["name"] for p in json.loads((copy / "plan.json").read_text())["points"]]
    running, missing = copy / "runs" / names[0], copy / "runs" / names[1]
    (running / "summary.json").unlink()
    (copy / "logs" / f"{names[0]}.rc").unlink()
    lines = (running / "metrics.jsonl").read_text().splitlines(keepends=True)
    (running / "metrics.jsonl").write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])  # mid-write
    shutil.rmtree(missing)
    (copy / "logs" / f"{names[1]}.rc").unlink()
    frames = analysis.frame(copy)
    states = dict(zip(frames.runs["run"], frames.runs["state"]))
    assert states[names[0]] == "unfinished" and states[names[1]] == "missing"
    row = frames.runs.set_index("run").loc[names[0]]
    assert all(math.isnan(row[m]) for m in ("mean_shift", "distance_to_mean_peer_mean"))  # no final metrics yet
    assert names[1] not in set(frames.records["run"])
    done_lines = [json.loads(line) for line in lines[:-1]]
    kept = frames.records[frames.records["run"] == names[0]]
    expected = {}
    for record in done_lines:
        reader = expected_round if record["type"] == "round" else expected_eval
        expected.update({(record["round"], record["type"], m, p): v for (m, p), v in reader(record).items()})
    assert as_dict(kept) == expected


def test_run_frame_is_the_runs_rows_and_lone_runs_join_studies(study: Path) -> None:
    name = json.loads((study / "plan.json").read_text())["points"][0]["name"]
    run = load_run(study / "runs" / name)
    both = analysis.frame([study / "runs" / name, study])
    lone = both.records[both.records["study"].isna()]
    columns = ["round", "kind", "metric", "base", "model", "statistic", "peer", "value"]
    assert list(lone.columns) == ["study", "run", AXIS, "seed", *columns]
    assert lone[AXIS].isna().all() and (lone["run"] == name).all()
    pd.testing.assert_frame_equal(lone[columns].reset_index(drop=True), run.frame())
    assert len(both.runs) == 5 and both.runs["study"].isna().sum() == 1


def test_a_folder_of_runs_and_studies_skips_the_rest_with_a_warning_each(study: Path, tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    shutil.copytree(study / "runs", folder)
    shutil.copytree(study, folder / "zz-study")
    (folder / "notes").mkdir()
    (folder / "broken").mkdir()
    (folder / "broken" / "config.yaml").write_text("- not a mapping\n")
    with pytest.warns(UserWarning) as caught:
        frames = analysis.frame(folder)
    assert sorted(str(w.message).split(": ")[1].split()[1] for w in caught) == [str(folder / "broken"),
                                                                                 str(folder / "notes")]
    names = [p["name"] for p in json.loads((study / "plan.json").read_text())["points"]]
    assert list(frames.runs["run"]) == sorted(names) + names  # the lone runs in name order, then the study's
    assert frames.runs["study"].fillna("-").tolist() == ["-"] * 4 + ["tiny"] * 4


# (metric, peer, the record's per-peer names) -> (base, model, statistic), by the rule of analysis.tidy's docstring
PARTS = {("test_acc_avg", None, ()): ("test_acc", "average", None),
         ("test_acc_untrained", None, ()): ("test_acc", "untrained", None),
         ("test_acc_peer_min", None, ()): ("test_acc", "peer", "min"),
         ("drift_to_avg_peer_mean", None, ()): ("drift_to_avg", "peer", "mean"),
         ("drift_to_avg", 3, ("drift_to_avg",)): ("drift_to_avg", "peer", None),
         ("drift_to_avg", None, ("drift_to_avg",)): ("drift_to_avg", None, None),
         ("loss_mean", None, ("loss",)): ("loss", "peer", "mean"),
         ("shard_mean", None, ()): ("shard_mean", None, None),
         ("loss_stats.std", None, ("loss",)): ("loss", "peer", "std"),
         ("network.degree_stats.max", None, ()): ("network.degree", "peer", "max"),
         ("network.sigma2", None, ()): ("network.sigma2", None, None),
         ("consensus_distance", None, ()): ("consensus_distance", None, None)}


@pytest.mark.parametrize("key", PARTS)
def test_metric_parts_name_the_model_and_statistic(key: tuple) -> None:
    from analysis.tidy import metric_parts

    metric, peer, per_peer = key
    assert metric_parts(metric, peer, set(per_peer)) == PARTS[key]


def test_a_groupby_over_the_peers_own_values_counts_each_once(study: Path) -> None:
    records = analysis.frame(study).records
    full = records[(records[AXIS] == 0) & (records["kind"] == "eval")]
    own = full[(full["model"] == "peer") & full["statistic"].isna()]
    assert own["peer"].notna().all()  # the peers' own values are exactly the per-peer rows
    assert len(own) == len(full[full["peer"].notna()])
    means = own.groupby(["run", "round", "base"])["value"].mean()
    stated = full[full["statistic"] == "mean"].set_index(["run", "round", "base"])["value"]
    assert len(stated) and means.loc[stated.index].to_numpy() == pytest.approx(stated.to_numpy(), rel=1e-9)
    rounds = records[(records[AXIS] == 2) & (records["metric"] == "loss_stats.mean")]
    assert set(rounds["base"]) <= {"loss"} and set(rounds["model"]) <= {"peer"}
