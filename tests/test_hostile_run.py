"""The red team's third round (issue 55) against a run's own options and folder: legal-looking numbers that made
a rank loop for ever, a resumed folder whose files are links, and refusals that had become tracebacks. Each is one
line naming the option or file, exit 2, within a deadline, and nothing is written outside the run folder."""
from __future__ import annotations

import json
import os
import stat
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
    (["--algorithm", "consensus", "--peers", "6", "--byzantine", "99"], "--byzantine: 99 attackers"),
    (["--algorithm", "consensus", "--peers", "6", "--byzantine", "3,99"], "--byzantine: peer 99 does not exist"),
], ids=["base-degree", "dp-epsilon", "byzantine-count", "byzantine-peer"])
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
