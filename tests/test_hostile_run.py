"""The red team's third round (issue 55) against a run's own options and folder: legal-looking numbers that made
a rank loop for ever, a resumed folder whose files are links, and refusals that had become tracebacks. Each is one
line naming the option or file, exit 2, within a deadline, and nothing is written outside the run folder."""
from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from p2pfl.privacy.accountant import ORDERS, epsilon, noise_for
from p2pfl.runtime.files import not_plain
from topologies.base import TopologyError
from topologies.base_graph import simple_base_graph

from conftest import run_job

#: Seconds a refusal may take: each case refused before the first round (a hang is killed and fails here).
DEADLINE_S = 120
QUICK = ["--no-progress", "--no-plots"]


def refused(args: list[str], out: Path) -> str:
    """The one line of a run refused with exit 2 (asserted), its stderr holding no traceback."""
    done = run_job(["-m", "p2pfl.run", *args, "--out", str(out), *QUICK], ranks=0, timeout=DEADLINE_S)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("p2pfl: error: "), done.stderr[-2000:]
    return lines[-1]


@pytest.mark.parametrize("args, named", [
    (["--algorithm", "consensus", "--topology", "base", "--max-degree", "1000000000000", "--peers", "6"],
     "max_degree 1000000000000"),
    (["--algorithm", "fedavg", "--dataset", "fashion-mnist", "--dp-clip", "1", "--dp-epsilon", "1e20"],
     "--dp-epsilon"),
    (["--algorithm", "consensus", "--vector-size", "1000000000000"], "over the memory budget"),
    (["--algorithm", "consensus", "--peers", "6", "--byzantine", "99"], "--byzantine: 99 attackers"),
    (["--algorithm", "consensus", "--peers", "6", "--byzantine", "3,99"], "--byzantine: peer 99 does not exist"),
], ids=["base-degree", "dp-epsilon", "vector-size", "byzantine-count", "byzantine-peer"])
def test_a_legal_looking_number_is_one_line_within_the_deadline(args: list[str], named: str,
                                                                 tmp_path: Path) -> None:
    line = refused([*args, "--rounds", "1"], tmp_path)
    assert named in line, line


def test_a_noise_the_accountant_cannot_account_leaves_a_failed_summary_naming_it(tmp_path: Path) -> None:
    line = refused(["--algorithm", "fedavg", "--dataset", "fashion-mnist", "--peers", "2", "--rounds", "1",
                    "--dp-clip", "1", "--dp-noise", "1e-300"], tmp_path)
    assert "--dp-noise 1e-300" in line, line
    (run,) = tmp_path.iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "failed" and line.removeprefix("p2pfl: error: ") in summary["reason"], summary


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path]:
    """A two-round run checkpointed each round, and the options that resume it."""
    out = tmp_path_factory.mktemp("runs")
    args = ["--algorithm", "consensus", "--peers", "4", "--rounds", "2", "--checkpoint-every", "1"]
    done = run_job(["-m", "p2pfl.run", *args, "--out", str(out), "--name", "run", *QUICK], ranks=0)
    assert done.returncode == 0, done.stderr[-2000:]
    return args, out / "run"


def _plant(folder: Path, name: str, target: Path) -> None:
    (folder / name).unlink()
    (folder / name).symlink_to(target)


@pytest.mark.parametrize("planted", [".lock", "metrics.jsonl", "checkpoint", "config.yaml"])
def test_resume_refuses_a_folder_holding_a_link_and_writes_nothing_through_it(
        planted: str, finished_run: tuple[list[str], Path], tmp_path: Path) -> None:
    import shutil

    args, run = finished_run
    folder = tmp_path / "copy"
    shutil.copytree(run, folder, symlinks=True)
    victim = tmp_path / "victim"
    if planted in (".lock", "config.yaml"):  # a link to an existing file: its target must stay as it was
        victim.write_text("keep\n")
        (folder / planted).unlink()
        (folder / planted).symlink_to(victim)
    elif planted == "metrics.jsonl":  # a dangling link: its target must not be created
        _plant(folder, planted, victim)
    else:  # a folder replaced by a link to a copy of it elsewhere: nothing may be written there
        shutil.move(folder / planted, victim)
        (folder / planted).symlink_to(victim, target_is_directory=True)
    before = sorted((p.name, p.stat().st_size) for p in tmp_path.rglob("*") if p.is_file())
    line = refused([*args, "--resume", str(folder)], tmp_path / "unused")
    assert f"--resume {folder}" in line and planted in line, line
    after = sorted((p.name, p.stat().st_size) for p in tmp_path.rglob("*") if p.is_file())
    assert after == before
    if planted in (".lock", "config.yaml"):
        assert victim.read_text() == "keep\n"
    if planted == "metrics.jsonl":
        assert not victim.exists()


def test_resume_refuses_a_fifo_in_place_of_a_record(finished_run: tuple[list[str], Path], tmp_path: Path) -> None:
    import shutil

    args, run = finished_run
    folder = tmp_path / "copy"
    shutil.copytree(run, folder)
    (folder / "metrics.jsonl").unlink()
    os.mkfifo(folder / "metrics.jsonl")  # an open for writing would wait for a reader for ever
    line = refused([*args, "--resume", str(folder)], tmp_path / "unused")
    assert "metrics.jsonl" in line, line


def test_not_plain_finds_links_dangling_links_fifos_and_links_below(tmp_path: Path) -> None:
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / "file").write_text("x")
    (tmp_path / "sub" / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    (tmp_path / "sub" / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "sub" / "deeper" / "dir-link").symlink_to(tmp_path / "sub", target_is_directory=True)
    os.mkfifo(tmp_path / "fifo")
    expected = sorted(p for p in tmp_path.rglob("*")
                      if not (stat.S_ISREG(os.lstat(p).st_mode) or stat.S_ISDIR(os.lstat(p).st_mode)))
    assert len(expected) == 4 and not_plain(tmp_path) == expected


@pytest.mark.parametrize("target, delta, rate, steps", [(2.0, 1e-5, 0.02, 500), (8.0, 1e-5, 0.1, 100),
                                                       (0.5, 1e-5, 0.01, 1000), (50.0, 1e-6, 0.5, 10)])
def test_the_bounded_search_gives_opacus_sigma_for_ordinary_targets(target: float, delta: float, rate: float,
                                                                     steps: int) -> None:
    import warnings

    from opacus.accountants.utils import get_noise_multiplier

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = get_noise_multiplier(target_epsilon=target, target_delta=delta, sample_rate=rate, steps=steps,
                                         accountant="rdp", alphas=list(ORDERS))
    assert noise_for(target, delta, rate, steps) == reference


@pytest.mark.parametrize("target", [1e6, 1e13, 1e20])
def test_the_search_ends_for_targets_opacus_never_reached_and_spends_at_most_the_target(target: float) -> None:
    sigma = noise_for(target, 1e-5, 0.02, 500)
    spent = epsilon(sigma, 0.02, 500, 1e-5)
    assert spent <= target
    assert target - spent <= max(0.01, 1e-6 * target)


def test_a_noise_too_small_for_the_accountant_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="too small for the accountant"):
        epsilon(1e-300, 0.02, 500, 1e-5)


@pytest.mark.parametrize("n", [2, 6, 17])
def test_base_graphs_take_degrees_up_to_peers_minus_one_and_refuse_more(n: int) -> None:
    for k in range(1, n):
        graph = simple_base_graph(n, 0, 1, max_degree=k)
        assert max(d for _, d in graph.to_undirected().degree()) <= k
    with pytest.raises(TopologyError, match=f"max_degree {n}"):
        simple_base_graph(n, 0, 1, max_degree=n)


def test_a_plugin_redeclaring_a_core_option_or_interrupting_its_import_is_one_line(tmp_path: Path) -> None:
    clash = tmp_path / "clash.py"
    clash.write_text("from p2pfl.options import method_options, opt\n\n\n@method_options('clash-section')\n"
                     "class Clash:\n    rounds: int = opt(3, 'a second --rounds')\n")
    interrupt = tmp_path / "interrupt.py"
    interrupt.write_text("raise KeyboardInterrupt\n")
    for plugin, named in ((clash, "options ['rounds'] of section 'clash-section' are p2pfl's own"),
                          (interrupt, "KeyboardInterrupt")):
        line = refused(["--plugin", str(plugin), "--algorithm", "consensus", "--peers", "3", "--rounds", "1"],
                       tmp_path / "out")
        assert f"--plugin {plugin}" in line and named in line, line


def test_resume_whose_lock_cannot_be_taken_is_one_line(finished_run: tuple[list[str], Path],
                                                       tmp_path: Path) -> None:
    import shutil

    args, run = finished_run
    folder = tmp_path / "copy"
    shutil.copytree(run, folder)
    (folder / ".lock").unlink()
    (folder / ".lock").mkdir()  # as a read-only mount would, the lock cannot be opened for writing
    line = refused([*args, "--resume", str(folder)], tmp_path / "unused")
    assert "cannot take the run folder's lock" in line and ".lock" in line, line


def _study_refused(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    from p2pfl.study.__main__ import main as study_main

    assert study_main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("p2pfl.study: error: "), err
    return err[0]


def _study_file(tmp_path: Path, study: dict) -> Path:
    import yaml

    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


BASE = {"algorithm": "consensus", "vector_size": 10, "rounds": 1, "peers": 3, "eval_every": 0, "plots": False}


def test_a_tune_grid_of_ten_to_the_ten_is_counted_not_listed(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # two options of 10^5 values each: listing the grid would take 10^10 entries (hours and terabytes)
    grid = {"lr": [round(1e-6 * (i + 1), 12) for i in range(10 ** 5)],
            "momentum": [i / 10 ** 5 for i in range(10 ** 5)]}
    study = {"name": "huge", "base": {**BASE, "algorithm": "fedavg", "dataset": "synthetic"},
             "axes": {"seed": [0]}, "tune": {"grid": grid, "seeds": [100], "validation": 0.25}}
    line = _study_refused([str(_study_file(tmp_path, study)), "--out", str(tmp_path / "out")], capsys)
    assert "10000000001 points with the tuning points" in line and "at most 100000" in line, line


def test_a_corrupt_plan_and_an_unwritable_out_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from p2pfl.study.__main__ import main as study_main

    path = _study_file(tmp_path, {"name": "s", "base": BASE, "axes": {"seed": [0]}})
    out = tmp_path / "out"
    assert study_main([str(path), "--out", str(out), "--dry-run"]) == 0
    capsys.readouterr()
    (out / "s").mkdir(parents=True)
    (out / "s" / "plan.json").write_text('{"points": [')
    (out / "s" / "study.yaml").write_text(path.read_text())
    line = _study_refused([str(out / "s"), "--status"], capsys)
    assert "plan.json: unreadable (JSONDecodeError" in line, line
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    line = _study_refused([str(path), "--out", str(blocked / "below")], capsys)
    assert f"cannot write the study folder {blocked / 'below' / 's'}" in line, line


FOREVER = '''import os

import networkx as nx

from topologies import register


@register("forever")
def forever(n: int, seed: int = 0) -> nx.Graph:
    """A topology whose construction never ends (as Base-(k+1) with a degree of 10^12 did): busy, no collective."""
    open(os.environ["FOREVER_STARTED"], "w").close()
    while True:
        sum(range(10000))
'''


def _forever(tmp_path: Path, ranks: int, *extra: str) -> tuple[list[str], dict[str, str], Path]:
    import sys

    from conftest import ROOT, mpirun_path

    plugin = tmp_path / "forever.py"
    plugin.write_text(FOREVER)
    started = tmp_path / "started"
    cmd = [sys.executable, "-m", "p2pfl.run", "--plugin", str(plugin), "--topology", "forever", "--algorithm",
           "consensus", "--peers", "3", "--rounds", "1", "--out", str(tmp_path / "runs"), *QUICK, *extra]
    if ranks > 1:
        launcher = mpirun_path()
        if launcher is None:
            pytest.skip("no mpirun available")
        cmd = [launcher, "-n", str(ranks), *cmd]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "FOREVER_STARTED": str(started)}
    return cmd, env, started


@pytest.mark.parametrize("ranks", [1, 2])
def test_a_set_up_step_computing_past_the_timeout_ends_the_job_naming_it(ranks: int, tmp_path: Path) -> None:
    import subprocess

    cmd, env, _ = _forever(tmp_path, ranks, "--timeout", "2")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=DEADLINE_S)
    assert done.returncode == 3, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("p2pfl: timeout:")]
    assert sorted(line.split()[3] for line in lines) == [str(r) for r in range(ranks)], done.stderr[-2000:]
    for line in lines:
        assert "in set-up in build_context without reaching the next collective (--timeout 2)" in line, line


def _signalled_when(cmd: list[str], env: dict[str, str], ready: Callable[[], bool]) -> tuple[int, str, float]:
    """Start `cmd`, send it SIGTERM once `ready()`; its exit status, stderr and the seconds it took to end."""
    import signal
    import subprocess
    import time

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while proc.poll() is None and time.monotonic() < deadline and not ready():
            time.sleep(0.05)
        assert proc.poll() is None and ready(), proc.communicate(timeout=10)
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        return proc.returncode, err, time.monotonic() - signalled
    finally:
        proc.kill()


def test_a_stop_signal_ends_a_set_up_step_computing_at_length_promptly(tmp_path: Path) -> None:
    from p2pfl.runtime.preemption import PREEMPTED_EXIT, SETUP_STOP_GRACE_S

    cmd, env, started = _forever(tmp_path, 1, "--timeout", "600")
    status, err, took = _signalled_when(cmd, env, started.exists)
    assert status == PREEMPTED_EXIT, err[-2000:]
    assert "SIGTERM received in set-up" in err and "stopped before the first round" in err, err[-2000:]
    # the grace and an interpreter's exit; a set-up step left to run would have taken the whole --timeout of 600 s
    assert took < SETUP_STOP_GRACE_S + 30, took
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_stop_signal_ends_a_round_computing_at_length_after_the_stop_grace(tmp_path: Path) -> None:
    import sys

    from p2pfl.runtime.preemption import PREEMPTED_EXIT

    from conftest import ROOT

    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "p2pfl.run", "--algorithm", "fedavg", "--dataset", "synthetic", "--peers", "2",
           "--rounds", "2", "--local-steps", "1000000000000", "--stop-grace", "2", "--out", str(out), "--name", "r",
           *QUICK]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    records = out / "r" / "metrics.jsonl"
    # round 0's record (the start) written: round 1's 10^12 local steps are under way
    status, err, took = _signalled_when(cmd, env, lambda: records.is_file() and '"round": 0' in records.read_text())
    assert status == PREEMPTED_EXIT, err[-2000:]
    assert "SIGTERM received in a round that had not ended 2 s later (--stop-grace)" in err, err[-2000:]
    assert 2 <= took < 2 + 30, took  # the grace, not the round's end (never)
