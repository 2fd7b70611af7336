"""The run folder of real (in-process) runs holds exactly the records p2pfl.records declares, and analysis reads
every field it needs from it."""
from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

import numpy as np
import pytest

import topologies
from analysis import load_run, plot_run
from analysis.plots import consensus_shares, second_eigenvalue
from analysis.report import runs_table
from p2pfl.fedmuscle.records import MuscleManifest as Manifest
from p2pfl.fedmuscle.records import MuscleSummary as Summary
from p2pfl.records import (
    LOSS,
    MEAN,
    TIMING_FIELDS,
    EvalRecord,
    RoundRecord,
    RoundStart,
    metric_names,
)

from golden_cases import options, run_case

#: Between them these runs write every key Manifest and Summary declare: a method without data (consensus),
#: the learners with their mu entries (fedprox, moon with partial participation, and DP-SGD: its dp_sgd and
#: dp_epsilon entries), FedMuscle with a spec.
CASES = ["consensus", "fedprox", "moon", "fedmuscle-hetero"]
CHANGES = {"moon": {"dp_clip": 1.0, "dp_noise": 1.0}}


def problems(value: Any, tp: Any, where: str = "") -> list[str]:
    """Where `value` (as JSON reads it back) departs from the type `tp`; [] when it conforms.

    TypedDicts must hold their required keys and no undeclared key; an int is a float (PEP 484)."""
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any:
        return []
    if is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__}, expected an object"]
        hints = get_type_hints(tp)
        out = [f"{where}.{k}: missing" for k in sorted(tp.__required_keys__ - value.keys())]
        out += [f"{where}.{k}: not declared" for k in sorted(value.keys() - hints.keys())]
        for key in value.keys() & hints.keys():
            out += problems(value[key], hints[key], f"{where}.{key}")
        return out
    if origin is Literal:
        return [] if value in args else [f"{where}: {value!r} not one of {args}"]
    if origin in (Union, types.UnionType):
        tries = [problems(value, arg, where) for arg in args]
        return [] if [] in tries else min(tries, key=len)
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: {type(value).__name__}, expected a list"]
        return [p for i, item in enumerate(value) for p in problems(item, args[0], f"{where}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__}, expected an object"]
        return [p for key, item in value.items() for p in problems(item, args[1], f"{where}.{key}")]
    if tp is type(None):
        return [] if value is None else [f"{where}: {value!r}, expected null"]
    allowed = {float: (int, float), int: (int,), str: (str,), bool: (bool,)}[tp]
    if isinstance(value, bool) and tp is not bool or not isinstance(value, allowed):
        return [f"{where}: {value!r}, expected {tp.__name__}"]
    return []


def test_problems_sees_missing_undeclared_and_mistyped_keys() -> None:
    good = {"type": "round", "round": 0, "elapsed_s": 0.0, "consensus_distance": None}
    assert problems(good, RoundStart) == []
    assert problems({**good, "round": 1.5}, RoundStart) == [".round: 1.5, expected int"]
    assert problems({**good, "type": "eval"}, RoundStart) == [".type: 'eval' not one of ('round',)"]
    assert problems({**good, "extra": 1}, RoundStart) == [".extra: not declared"]
    assert problems({k: v for k, v in good.items() if k != "elapsed_s"}, RoundStart) == [".elapsed_s: missing"]
    assert problems({**good, "consensus_distance": True}, RoundStart) == [".consensus_distance: True, expected float"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("runs")
    for case in CASES:
        run_case(case, out, **CHANGES.get(case, {}))
    return {case: out / case for case in CASES}


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("case", CASES)
def test_run_folder_holds_exactly_the_declared_records(runs: dict[str, Path], case: str) -> None:
    path = runs[case]
    assert problems(json.loads((path / "manifest.json").read_text()), Manifest, "manifest") == []
    assert problems(json.loads((path / "summary.json").read_text()), Summary, "summary") == []
    records = _lines(path)
    assert records[0]["round"] == 0 and problems(records[0], RoundStart, "round 0") == []
    rounds = [r for r in records[1:] if r["type"] == "round"]
    evals = [r for r in records if r["type"] == "eval"]
    assert [r["round"] for r in rounds] == [1, 2, 3] and [r["round"] for r in evals] == [2, 3]
    assert len(records) == 1 + len(rounds) + len(evals)
    for record in rounds:
        names = metric_names(record)
        assert (LOSS in names) == (case != "consensus")  # the learners' training loss; gossip has none
        fixed = {k: v for k, v in record.items() if k.removesuffix(MEAN) not in names}
        assert problems(fixed, RoundRecord, f"round {record['round']}") == []
        for name in names:
            assert problems(record[name], dict[str, float], name) == []
            assert set(record[name]) == {str(p) for p in record["active"]}
            assert problems(record[name + MEAN], float | None, name + MEAN) == []
    for record in evals:
        assert problems(record, EvalRecord, f"eval {record['round']}") == []
    assert TIMING_FIELDS <= set(rounds[0]) and TIMING_FIELDS & set(records[0]) == {"elapsed_s"}


CLOCK = ["--algorithm", "consensus", "--peers", "4", "--vector-size", "50", "--compute-time", "1", "--latency",
         "0.1", "--no-progress", "--no-plots"]


@pytest.fixture(scope="module")
def clock_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A synchronous run with the simulated clock and an asynchronous one."""
    from p2pfl.run import main

    out = tmp_path_factory.mktemp("clock")
    assert main([*CLOCK, "--rounds", "3", "--eval-every", "2", "--out", str(out), "--name", "sync"]) == 0
    assert main([*CLOCK, "--mode", "async", "--updates", "12", "--eval-every-s", "1.5", "--out", str(out), "--name",
                 "async"]) == 0
    return {"sync": out / "sync", "async": out / "async"}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_clock_runs_hold_exactly_the_declared_records(clock_runs: dict[str, Path], mode: str) -> None:
    path = clock_runs[mode]
    assert problems(json.loads((path / "manifest.json").read_text()), Manifest, "manifest") == []
    assert problems(json.loads((path / "summary.json").read_text()), Summary, "summary") == []
    records = _lines(path)
    assert problems(records[0], RoundStart, "round 0") == [] and records[0]["sim_time_s"] == 0.0
    for record in records[1:]:
        assert "sim_time_s" in record
        if record["type"] == "round":
            assert metric_names(record) == []  # the clock's per-peer seconds are not metrics
        kind = RoundRecord if record["type"] == "round" else EvalRecord
        assert problems(record, kind, f"{record['type']} {record['round']}") == []


def test_the_runs_write_every_declared_manifest_and_summary_key(runs: dict[str, Path],
                                                                clock_runs: dict[str, Path]) -> None:
    written = {name: set() for name in ("manifest", "summary")}
    for path in [*runs.values(), *clock_runs.values()]:
        for name in written:
            written[name] |= set(json.loads((path / f"{name}.json").read_text()))
    assert written["manifest"] == set(get_type_hints(Manifest))
    assert written["summary"] == set(get_type_hints(Summary))


@pytest.mark.parametrize("case", CASES)
def test_analysis_reads_every_field_it_needs(runs: dict[str, Path], case: str, tmp_path: Path) -> None:
    opts = options(case)
    run = load_run(runs[case])
    assert run.config == run.manifest["config"]
    assert (run.algorithm, run.topology_name) == (opts["algorithm"], opts["topology"])
    assert (run.num_peers, run.planned_rounds, run.rounds_done) == (opts["peers"], opts["rounds"], opts["rounds"])
    assert run.wall_time_s() == run.summary["wall_s"] > 0
    assert run.final_metrics() == run.summary["final"] == run.evals[-1]["metrics"]
    assert run.final_per_peer().keys() == {str(p) for p in range(opts["peers"])}
    expected_label = None if case == "consensus" else f"dirichlet(alpha={opts['alpha']})"
    assert run.partition_label == expected_label
    if run.class_counts is not None:
        assert len(run.class_counts) == opts["peers"]
    raw = [r for r in _lines(runs[case]) if r["type"] == "round" and r["round"] > 0]
    sent = [sum(r["bytes_sent_per_peer"].values()) / len(r["active"]) for r in raw]
    assert run.bytes_sent_per_peer_round() == pytest.approx(np.mean(sent))
    # the topology statistics are topologies.stats' for the graph the options describe
    graph = topologies.build(opts["topology"], opts["peers"], seed=opts["seed"],
                             p=opts["p"] if opts["topology"] == "random" else None)
    stats = topologies.statistics(graph, topologies.mixing_matrix(graph, opts["mixing"]))
    assert second_eigenvalue(run) == pytest.approx(stats["lambda2"])
    assert consensus_shares(run) == pytest.approx(stats["consensus_share"])
    assert "?" not in runs_table([run])
    plots = {p.name for p in plot_run(run, out_dir=tmp_path)}
    assert {"metrics.png", "topology.png", "per_peer.png"} <= plots
    assert ("consensus.png" in plots) == (case != "fedmuscle-hetero")  # FedMuscle has no consensus distance
