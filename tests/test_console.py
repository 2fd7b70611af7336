"""The console (p2pfl.runtime.console, p2pfl.runtime.progress): --quiet and simulate(quiet=True/verbose=False)
print nothing on stdout yet the Run holds the summary; off a terminal the progress is lines without carriage
returns, showing the last evaluation's headline; other ranks show warnings only, prefixed with their rank; the
summary is a table whose columns line up whatever the metric names, without bookkeeping; the whole time counts
from the process's start."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import p2pfl
from p2pfl.run import main
from p2pfl.runtime.progress import PROGRESS_LINES, metric_table

from conftest import ROOT, run_job

CONSENSUS = ["--algorithm", "consensus", "--peers", "4", "--vector-size", "20", "--rounds", "20", "--eval-every",
             "5", "--no-plots"]


def test_quiet_prints_nothing_and_the_run_holds_everything(tmp_path: Path, capsys) -> None:
    assert main([*CONSENSUS, "--quiet", "--out", str(tmp_path), "--name", "cli"]) == 0
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", "")
    for options in ({"quiet": True}, {"verbose": False}):
        run = p2pfl.simulate(algorithm="consensus", peers=4, vector_size=20, rounds=3, plots=False,
                             out=str(tmp_path), **options)
        out = capsys.readouterr()
        assert (out.out, out.err) == ("", "")
        assert run.summary["final"]["distance_to_mean_peer_mean"] >= 0 and len(run.rounds) == 4
    assert main([*CONSENSUS, "--rounds", "1", "--out", str(tmp_path), "--name", "loud"]) == 0  # quiet is not kept
    assert "p2pfl: consensus on cycle (4 peers, 1 rounds)" in capsys.readouterr().out


def test_verbose_shows_a_debug_line_a_round(tmp_path: Path, capsys) -> None:
    assert main([*CONSENSUS, "--rounds", "3", "--verbose", "--out", str(tmp_path), "--name", "v"]) == 0
    debug = [line for line in capsys.readouterr().out.splitlines() if line.startswith("p2pfl: debug: ")]
    assert [line.split(":")[2].strip() for line in debug] == ["round 1", "round 2", "round 3"]


def test_quiet_and_verbose_together_are_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main([*CONSENSUS, "--quiet", "--verbose", "--out", str(tmp_path)])
    err = capsys.readouterr().err.splitlines()
    assert stop.value.code == 2 and err == ["p2pfl: error: --quiet and --verbose: give one of them"]
    with pytest.raises(ValueError, match="--quiet and --verbose"):
        p2pfl.simulate(algorithm="consensus", peers=4, quiet=True, verbose=True, out=str(tmp_path))


def test_off_a_terminal_the_progress_is_lines_with_the_last_evaluations_headline(tmp_path: Path, capsys) -> None:
    """20 rounds: a line every 2 rounds, no carriage return anywhere; from round 6 on each line shows the peers'
    mean distance to the mean of the last evaluation (every 5 rounds), as metrics.jsonl holds it."""
    assert main([*CONSENSUS, "--progress", "--out", str(tmp_path), "--name", "r"]) == 0
    out = capsys.readouterr()
    assert "\r" not in out.out + out.err
    lines = [line for line in out.out.splitlines() if line.startswith("p2pfl: consensus/cycle: round ")]
    step = 20 // PROGRESS_LINES
    assert [int(re.search(r"round (\d+)/20", line).group(1)) for line in lines] == list(range(step, 21, step))
    evals = {}
    for text in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines():
        record = json.loads(text)
        if record["type"] == "eval":
            evals[record["round"]] = record["metrics"]["distance_to_mean_peer_mean"]
    for line in lines:
        t = int(re.search(r"round (\d+)/", line).group(1))
        last = max((r for r in evals if r < t), default=None)
        shown = re.search(r"distance_to_mean_peer_mean=(\S+?)(,|$)", line)
        assert (shown is None) == (last is None), line
        if last is not None:
            assert shown.group(1) == f"{evals[last]:.4g}", line


def test_other_ranks_show_only_warnings_with_their_rank(tmp_path: Path) -> None:
    script = tmp_path / "speak.py"
    script.write_text(textwrap.dedent("""
        import logging
        from p2pfl.comm.world import World
        from p2pfl.runtime import console
        world = World.detect()
        console.configure(world.rank)
        log = logging.getLogger("p2pfl.test")
        log.info(f"info from {world.rank}")
        log.warning(f"warning from {world.rank}")
        world.barrier()
    """))
    proc = run_job([str(script)], ranks=2)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["info from 0"]
    assert sorted(proc.stderr.splitlines()) == ["p2pfl: rank 1: warning: warning from 1",
                                                "p2pfl: warning: warning from 0"]


def test_the_summary_table_lines_up_whatever_the_names_and_leaves_bookkeeping_out() -> None:
    final = {"test_acc_avg": 0.5, "a_metric_name_longer_than_twenty_eight_characters_peer_mean": 0.25,
             "a_metric_name_longer_than_twenty_eight_characters_peer_max": 1.0, "test_acc_peer_mean": 0.125,
             "test_acc_untrained": 0.1, "peers_scored": 4.0, "best_cluster": 1.0, "clusters_count": 2.0,
             "mean_shift": 3e-08}
    assert metric_table(final) == [
        "metric                                             value  average model  peers' mean  peers' max  untrained",
        "test_acc                                                            0.5        0.125                    0.1",
        "a_metric_name_longer_than_twenty_eight_characters                               0.25           1",
        "mean_shift                                         3e-08",
    ]


def test_the_whole_time_counts_from_the_process_start() -> None:
    """A second's sleep before p2pfl is imported is inside the time since the process started."""
    code = ("import time; time.sleep(1.0); from p2pfl.runtime.progress import process_started; "
            "print(time.time() - process_started())")
    age = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                               check=True).stdout)
    assert age >= 1.0 - 0.01  # /proc counts in clock ticks (10 ms)
