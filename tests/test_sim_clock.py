"""The simulated clock of synchronous runs (SPEC §9) end to end: every round's simulated seconds equal the
closed form of the network model on the bytes that really crossed; a run without time options records as
before; a straggler's slowdown multiplies its compute; a resumed run's clock continues where it stopped."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from p2pfl.config import ConfigError, make_config, resolve
from p2pfl.run import main

VECTOR = 250  # floats: 1,000 bytes a float32 message
CONSENSUS = ["--algorithm", "consensus", "--peers", "6", "--vector-size", str(VECTOR), "--eval-every", "2",
             "--rounds", "4", "--no-progress", "--no-plots", "--seed", "3"]
TRAINING = ["--algorithm", "fedavg", "--peers", "4", "--rounds", "2", "--dataset", "synthetic", "--train-subset",
            "160", "--batch-size", "16", "--local-steps", "3", "--optimizer", "sgd", "--lr", "0.02", "--eval-every",
            "0", "--no-progress", "--no-plots", "--topology", "cycle", "--batch-peers", "off"]


def lines(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def run(tmp_path: Path, name: str, *args: str) -> list[dict]:
    assert main([*args, "--out", str(tmp_path), "--name", name]) == 0
    return lines(tmp_path / name)


def rounds_of(records: list[dict]) -> list[dict]:
    return [r for r in records if r["type"] == "round" and r["round"] >= 1]


def test_without_time_options_no_record_carries_a_clock(tmp_path: Path) -> None:
    for record in run(tmp_path, "off", *CONSENSUS):
        assert not [k for k in record if k.startswith("sim_")]


def test_cycle_round_is_compute_plus_latency_plus_two_messages_over_the_shared_upload(tmp_path: Path) -> None:
    """Each peer of a cycle sends its S bytes to two neighbours at once: U/2 each, so a round takes
    c + a + 2S/U (consensus: one computation a round), T rounds T times that."""
    c, a, upload, size = 0.5, 0.01, 1e5, 4 * VECTOR
    records = run(tmp_path, "cycle", *CONSENSUS, "--topology", "cycle", "--compute-time", str(c), "--latency",
                  str(a), "--upload-rate", str(upload))
    expected = c + a + 2 * size / upload
    assert records[0]["sim_time_s"] == 0.0
    for t, record in enumerate(rounds_of(records), start=1):
        assert record["bytes_sent_per_peer"] == {str(p): 2 * size for p in range(6)}
        assert record["sim_round_s"] == pytest.approx(expected, rel=1e-12)
        assert record["sim_time_s"] == pytest.approx(t * expected, rel=1e-12)
        assert set(record["sim_idle_s"].values()) == {0.0}
    evals = [r for r in records if r["type"] == "eval"]
    assert [e["sim_time_s"] for e in evals] == pytest.approx([2 * expected, 4 * expected], rel=1e-12)
    summary = json.loads((tmp_path / "cycle" / "summary.json").read_text())
    assert summary["sim_time_s"] == records[-2]["sim_time_s"]


def test_star_hub_shares_its_upload_and_download(tmp_path: Path) -> None:
    """The hub of a star of K sends K − 1 messages at U/(K − 1) each and receives K − 1 at D/(K − 1): its
    transfers take a + S(K − 1)/min(U, D), which every leaf waits for; a leaf's own compute is its idle's
    complement."""
    k, c, a, upload, download, size = 6, 0.2, 0.03, 4e4, 2e4, 4 * VECTOR
    records = run(tmp_path, "star", *CONSENSUS, "--topology", "star", "--compute-time", str(c), "--latency", str(a),
                  "--upload-rate", str(upload), "--download-rate", str(download))
    hub = a + size * (k - 1) / min(upload, download)
    for record in rounds_of(records):
        assert record["sim_round_s"] == pytest.approx(c + hub, rel=1e-12)
        assert record["sim_transfer_s"] == pytest.approx({str(p): hub for p in range(k)}, rel=1e-12)


def test_rounds_of_local_steps_take_rounds_times_steps_times_c(tmp_path: Path) -> None:
    """With free links, T rounds of E local steps take T·E·c; the stragglers' steps are F times slower, and the
    other peers idle the difference."""
    c, factor = 0.25, 4.0
    plain = run(tmp_path, "plain", *TRAINING, "--compute-time", str(c))
    assert [r["sim_time_s"] for r in rounds_of(plain)] == pytest.approx([3 * c, 6 * c], rel=1e-12)
    slow = run(tmp_path, "slow", *TRAINING, "--compute-time", str(c), "--stragglers", "0.25", "--straggler-work",
               "1", "--straggler-slowdown", str(factor))
    straggler = int(rounds_of(slow)[0]["network"]["straggling"][0])
    for record in rounds_of(slow):
        compute = record["sim_compute_s"]
        assert compute[str(straggler)] == pytest.approx(factor * 3 * c, rel=1e-12)
        assert {p: v for p, v in compute.items() if p != str(straggler)} == pytest.approx(
            {str(p): 3 * c for p in range(4) if p != straggler}, rel=1e-12)
        assert record["sim_idle_s"][str(straggler)] == 0.0
        assert record["sim_idle_s"][str((straggler + 1) % 4)] == pytest.approx((factor - 1) * 3 * c, rel=1e-12)
    # the clock does not touch the learning: the same losses as without it
    assert [r["loss"] for r in rounds_of(slow)] == [r["loss"] for r in rounds_of(run(tmp_path, "noclock", *TRAINING,
                                                                                        "--stragglers", "0.25",
                                                                                        "--straggler-work", "1"))]


def test_the_clock_leaves_the_numbers_as_they_were(tmp_path: Path) -> None:
    off = run(tmp_path, "a", *CONSENSUS, "--topology", "cycle")
    on = run(tmp_path, "b", *CONSENSUS, "--topology", "cycle", "--compute-time", "1", "--latency", "0.1")
    drop = ("elapsed_s", "round_s")

    def strip(records: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if not k.startswith(("sim_", "time_")) and k not in drop}
                for r in records]
    assert strip(off) == strip(on)


def test_a_resumed_run_continues_the_clock(tmp_path: Path) -> None:
    base = [*CONSENSUS, "--topology", "cycle", "--compute-time", "0.5", "--compute-spread", "0.5", "--latency",
            "0.02", "--checkpoint-every", "2"]
    full = run(tmp_path, "full", *base)
    assert main([*base, "--rounds", "2", "--out", str(tmp_path), "--name", "part"]) == 0
    assert main([*base, "--resume", str(tmp_path / "part")]) == 0
    resumed = lines(tmp_path / "part")
    assert [r.get("sim_time_s") for r in resumed] == [r.get("sim_time_s") for r in full]


@pytest.mark.parametrize(("options", "says"), [
    ({"compute_time": -1.0}, "--compute-time: must be >= 0"),
    ({"straggler_slowdown": 0.5}, "--straggler-slowdown: must be >= 1"),
    ({"updates": 5}, "--updates: belongs to --mode async"),
    ({"mode": "async"}, "--mode: async orders its events by simulated time"),
    ({"mode": "async", "compute_time": 1.0, "gossip": "choco"}, "--mode: async averages pairwise with dense"),
    ({"mode": "async", "compute_time": 1.0, "link_failure": 0.1}, "--mode: async runs on a static network"),
    ({"mode": "async", "compute_time": 1.0, "algorithm": "scaffold"}, "--mode: scaffold has no asynchronous form"),
    ({"compute_trace": "/nonexistent/trace.csv"}, "--compute-trace: file not found"),
    ({"compute_spread": 0.5}, "--compute-spread: spreads --compute-time"),
    ({"mode": "async", "compute_time": 1.0, "algorithm": "fedavg", "schedule": "cosine"},
     "--schedule: --mode async counts no common rounds"),
    ({"mode": "async", "compute_time": 1.0, "algorithm": "fedavg", "fedbn": "type"}, "--fedbn: --mode async"),
])
def test_time_options_are_refused_with_one_line(options: dict, says: str) -> None:
    with pytest.raises(ConfigError, match=says.replace("(", r"\(")):
        resolve(make_config(**{"algorithm": "consensus", "peers": 4, **options}), 1)


def test_a_trace_with_a_step_of_no_time_is_refused(tmp_path: Path) -> None:
    """A zero step time would put a peer's every event at one instant (and an async run's end nowhere)."""
    from p2pfl.network.timing import compute_times

    trace = tmp_path / "trace.csv"
    trace.write_text("1\n0\n2\n")
    with pytest.raises(ValueError, match="every step time must be a positive number"):
        compute_times(3, 0, 0.0, trace=trace)
