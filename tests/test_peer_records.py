"""--peer-records: above N peers the round and eval records hold statistics over the peers instead of one value a
peer; the statistics are those of a run with the same seed and full records, the keys are declared, and the
plots of such runs (and of large runs) are drawn without a graph layout."""
from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from test_records import problems

import analysis.plots
from analysis import load_run, plot_run
from analysis.runs import active_count, cumulative_bytes_per_peer
from p2pfl.records import (
    MEAN,
    STATS,
    EvalRecord,
    RoundRecord,
    SummarisedRound,
    metric_names,
    summarise_round,
)

K, LIMIT = 40, 10
#: quadratic's network-level round metric (Algorithm.round_metrics, `<name>: value`, not a declared key)
ROUND_METRICS = {"error"}
#: consensus (no per-peer round metric, per-peer eval metrics) and quadratic (a per-peer loss) with the clock's
#: per-peer seconds; both with partial participation, so rounds have inactive peers.
CASES = {
    "consensus": ["--algorithm", "consensus", "--vector-size", "10"],
    "quadratic": ["--algorithm", "quadratic", "--compute-time", "1", "--latency", "0.1"],
}
COMMON = ["--peers", str(K), "--rounds", "3", "--eval-every", "2", "--participation", "0.8", "--seed", "3",
          "--no-progress", "--no-plots"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Path]]:
    """Each case twice, with the same seed: every peer's values (0: never summarise) and summarised (K > N)."""
    from p2pfl.run import main

    out = tmp_path_factory.mktemp("peer-records")
    folders: dict[str, dict[str, Path]] = {}
    for case, args in CASES.items():
        for kind, limit in (("full", 0), ("summary", LIMIT)):
            name = f"{case}-{kind}"
            assert main([*args, *COMMON, "--peer-records", str(limit), "--out", str(out), "--name", name]) == 0
        folders[case] = {"full": out / f"{case}-full", "summary": out / f"{case}-summary"}
    return folders


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


def _expect(values: dict[str, float], stats: dict) -> None:
    """`stats` are numpy's statistics of the values (an expectation computed apart from p2pfl.records)."""
    v = np.asarray(list(values.values()), dtype=float)
    assert stats["count"] == len(v) and stats["nonfinite"] == 0
    assert stats["mean"] == pytest.approx(v.mean(), rel=1e-12)
    assert stats["std"] == pytest.approx(v.std(), rel=1e-9, abs=1e-12)
    assert (stats["min"], stats["max"]) == (v.min(), v.max())


@pytest.mark.parametrize("case", CASES)
def test_summarised_rounds_hold_the_full_runs_statistics(runs: dict[str, dict[str, Path]], case: str) -> None:
    full = [r for r in _records(runs[case]["full"]) if r["type"] == "round" and r["round"] > 0]
    summ = [r for r in _records(runs[case]["summary"]) if r["type"] == "round" and r["round"] > 0]
    assert [r["round"] for r in full] == [r["round"] for r in summ] == [1, 2, 3]
    for f, s in zip(full, summ):
        assert s["summarised"] is True and "summarised" not in f
        assert "active" not in s and s["active_count"] == len(f["active"])
        assert s["inactive"] == sorted(set(range(K)) - set(f["active"])) and s["inactive"]
        assert "degree" not in s["network"]
        _expect(f["network"]["degree"], s["network"]["degree_stats"])
        _expect(f["bytes_sent_per_peer"], s["bytes_sent_per_peer_stats"])
        assert (s["bytes_sent"], s["consensus_distance"]) == (f["bytes_sent"], f["consensus_distance"])
        names = metric_names(f)
        assert metric_names(s) == names == (["loss"] if case == "quadratic" else [])
        for name in names:
            _expect(f[name], s[name + STATS])
            assert s[name + MEAN] == f[name + MEAN] == s[name + STATS]["mean"]
        for key in ("sim_compute_s", "sim_transfer_s", "sim_idle_s"):
            assert (key in f) == (case == "quadratic") and key not in s
            if key in f:
                _expect(f[key], s[key + STATS])


@pytest.mark.parametrize("case", CASES)
def test_summarised_evals_hold_the_full_runs_statistics(runs: dict[str, dict[str, Path]], case: str) -> None:
    full = [r for r in _records(runs[case]["full"]) if r["type"] == "eval"]
    summ = [r for r in _records(runs[case]["summary"]) if r["type"] == "eval"]
    assert [r["round"] for r in full] == [r["round"] for r in summ] == [2, 3]
    for f, s in zip(full, summ):
        assert s["per_peer"] == {} and len(f["per_peer"]) == K and s["metrics"] == f["metrics"]
        names = sorted({k for m in f["per_peer"].values() for k in m})
        assert sorted(s["per_peer_stats"]) == names and s["per_peer_labels"] == {}
        for name in names:
            _expect({p: m[name] for p, m in f["per_peer"].items()}, s["per_peer_stats"][name])


@pytest.mark.parametrize("case", CASES)
def test_summarised_records_are_declared(runs: dict[str, dict[str, Path]], case: str) -> None:
    for record in _records(runs[case]["summary"])[1:]:
        if record["type"] == "eval":
            assert problems(record, EvalRecord, f"eval {record['round']}") == []
            continue
        names = metric_names(record)
        fixed = {k: v for k, v in record.items()
                 if k.removesuffix(STATS).removesuffix(MEAN) not in names and k not in ROUND_METRICS}
        assert problems(fixed, SummarisedRound, f"round {record['round']}") == []
    for record in _records(runs[case]["full"])[1:]:  # and the full records still RoundRecords
        if record["type"] == "round":
            names = metric_names(record)
            fixed = {k: v for k, v in record.items() if k.removesuffix(MEAN) not in names and k not in ROUND_METRICS}
            assert problems(fixed, RoundRecord, f"round {record['round']}") == []


def test_inactive_peers_beyond_the_limit_are_only_counted() -> None:
    record = {"type": "round", "round": 1, "active": [0, 1], "network": {"links": 1}, "loss": {"0": 1.0, "1": 3.0},
              "loss_mean": 2.0, "bytes_sent_per_peer": {"0": 4, "1": 4, "2": 0}}
    out = summarise_round(record, peers=5, limit=2)  # type: ignore[arg-type]
    assert (out["active_count"], out["inactive"]) == (2, None)
    assert out["loss_stats"] == {"mean": 2.0, "std": 1.0, "min": 1.0, "max": 3.0, "count": 2, "nonfinite": 0}
    assert summarise_round(record, peers=2, limit=2) is record  # type: ignore[arg-type]
    assert summarise_round(record, peers=5, limit=0) is record  # type: ignore[arg-type]


@pytest.mark.parametrize("case", CASES)
def test_analysis_reads_summarised_runs_as_full_ones(runs: dict[str, dict[str, Path]], case: str) -> None:
    full, summ = load_run(runs[case]["full"]), load_run(runs[case]["summary"])
    assert summ.summarised and not full.summarised
    assert summ.bytes_sent_per_peer_round() == pytest.approx(full.bytes_sent_per_peer_round())
    assert cumulative_bytes_per_peer(summ) == pytest.approx(cumulative_bytes_per_peer(full))
    assert [active_count(r) for r in summ.rounds[1:]] == [len(r["active"]) for r in full.rounds[1:]]
    assert summ.final_per_peer() is None and summ.mean_degree() == {}
    assert summ.peer_band("loss") == full.peer_band("loss")
    assert bool(summ.peer_band("loss")[0]) == (case == "quadratic")


def _no_layout(*args: object, **kwargs: object) -> None:
    raise AssertionError("spring_layout drawn above the threshold")


@pytest.mark.parametrize("case", CASES)
def test_plots_above_the_threshold_draw_no_layout(runs: dict[str, dict[str, Path]], case: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(nx, "spring_layout", _no_layout)
    monkeypatch.setattr(analysis.plots, "MANY_PEERS", LIMIT)  # 40 peers count as many
    summ = {p.name for p in plot_run(runs[case]["summary"], tmp_path / "summary")}
    assert summ == {"metrics.png", "metrics_bytes.png", "consensus.png", "topology.png"} | (
        {"metrics_time.png"} if case == "quadratic" else set())
    assert "per_peer.png and per_peer_degree.png not drawn" in capsys.readouterr().err
    full = {p.name for p in plot_run(runs[case]["full"], tmp_path / "full")}
    assert summ | {"per_peer.png", "per_peer_degree.png"} == full
    if case == "quadratic":  # the training loss's band comes from the summaries
        loss = analysis.plots.metric_panels(load_run(runs[case]["summary"]))[-1]
        assert set(loss.series) == {"value"} and len(loss.spread) >= 2
