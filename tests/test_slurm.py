"""launch/slurm.sbatch on a real one-node Slurm (the session fixture `slurm`, tests/slurm_cluster.py): a 2-rank job
through srun equals `mpirun -n 2` of the same configuration, and a job stopped in the middle, once by
`scontrol requeue` (SIGTERM to every process) and once by SIGUSR1 (the time-limit/preemption warning, after which
the script requeues the job itself), resumes from its checkpoints and ends as the uninterrupted run."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, mpirun_path
from golden_cases import normalise

pytestmark = [pytest.mark.slurm, pytest.mark.mpi]

#: the jobs use the venv running the tests (scripts/setup.sh's .venv in CI)
VENV = Path(sys.executable).parent.parent
SBATCH = ROOT / "launch" / "slurm.sbatch"
#: six rounds of about a second each (as in test_preemption), so that a stop lands in the middle of the run
CONFIG = {"algorithm": "fedavg", "peers": 4, "rounds": 6, "topology": "cycle", "dataset": "synthetic",
          "train_subset": 800, "batch_size": 16, "local_steps": 30, "eval_every": 0, "progress": False,
          "plots": False}
#: the template's 2 nodes x 4 tasks with a GPU each, cut down to this machine
RESOURCES = ["--nodes=1", "--ntasks-per-node=2", "--gpus-per-task=0", "--cpus-per-task=1", "--time=10"]
JOB_TIMEOUT = 300


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("config") / "run.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    return path


@pytest.fixture(scope="module")
def reference(config: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[], list[dict]]:
    """The normalised metrics of `mpirun -n 2` of the configuration, started at once to run beside the jobs."""
    launcher = mpirun_path()
    if launcher is None:
        pytest.skip("no mpirun available")
    out = tmp_path_factory.mktemp("reference")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([launcher, "-n", "2", sys.executable, "-m", "p2pfl.run", "--config", str(config),
                             "--out", str(out), "--name", "mpirun"], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    done: list[list[dict]] = []

    def metrics() -> list[dict]:
        if not done:
            log, _ = proc.communicate(timeout=JOB_TIMEOUT)
            assert proc.returncode == 0, log[-3000:]
            done.append(normalise(out / "mpirun" / "metrics.jsonl"))
        return done[0]

    yield metrics
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


def submit(slurm, config: Path, tmp_path: Path) -> tuple[int, Path, Path]:
    """sbatch the template from tmp_path; the job id, its run folder and its log."""
    env = {"P2PFL_VENV": str(VENV), "P2PFL_OUT": str(tmp_path / "runs"), "PYTHONPATH": str(ROOT),
           "PATH": f"{VENV / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    job = slurm.sbatch([*RESOURCES, f"--output={tmp_path}/slurm-%j.out", str(SBATCH), str(config)],
                       cwd=tmp_path, env=env)
    return job, tmp_path / "runs" / f"slurm-{job}", tmp_path / f"slurm-{job}.out"


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def _rounds_written(run: Path) -> int:
    return _read(run / "metrics.jsonl").count('"type": "round"')


def wait_until(what: str, ready: Callable[[], bool], slurm, job: int, log: Path) -> None:
    """Poll `ready` every 0.05 s while the job has not ended."""
    deadline = time.monotonic() + JOB_TIMEOUT
    polls = 0
    while not ready():
        polls += 1
        if (polls % 20 == 0 and slurm.ended(job)) or time.monotonic() > deadline:
            pytest.fail(f"job {job} ({slurm.state(job)}) never got to: {what}\n{_read(log)[-4000:]}")
        time.sleep(0.05)


def check_two_ranks(run: Path) -> None:
    """srun started one MPI job of two ranks (with --mpi=none they would be two singletons of size 1)."""
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["world_size"] == 2
    assert sorted(h["rank"] for h in manifest["hosts"]) == [0, 1]
    assert json.loads((run / "summary.json").read_text())["ranks"] == 2


def test_sbatch_runs_two_ranks_through_srun_with_mpiruns_metrics(slurm, config: Path, reference,
                                                                 tmp_path: Path) -> None:
    job, run, log = submit(slurm, config, tmp_path)
    state = slurm.wait(job, timeout=JOB_TIMEOUT)
    assert state == "COMPLETED", f"{state}\n{_read(log)[-4000:]}\n{slurm.show(job)}"
    for name in ("config.yaml", "manifest.json", "metrics.jsonl", "summary.json"):
        assert (run / name).is_file(), name
    check_two_ranks(run)
    assert "(restart 0)" in _read(log) and "--resume" not in _read(log)
    assert normalise(run / "metrics.jsonl") == reference()


def test_a_job_requeued_in_the_middle_resumes_from_its_checkpoint_and_ends_as_the_uninterrupted_run(
        slurm, config: Path, reference, tmp_path: Path) -> None:
    job, run, log = submit(slurm, config, tmp_path)
    wait_until("round 2 written", lambda: _rounds_written(run) >= 3, slurm, job, log)  # rounds 0-2: round 3 runs
    slurm.requeue(job)  # SIGTERM to every process of the job: the ranks finish the round and checkpoint
    stopped = re.compile(r"SIGTERM received: stopped after round (\d) of 6")
    wait_until("the SIGTERM checkpoint", lambda: stopped.search(_read(log)) is not None, slurm, job, log)
    first = int(stopped.search(_read(log)).group(1))
    assert (run / "checkpoint" / "state.json").is_file()
    # requeued: the job runs again 6-9 s later and resumes; stop it a second time as the time limit's warning or
    # a preemption does, with SIGUSR1: the script sees status 75 and requeues the job itself
    wait_until("the resumed run's first round", lambda: "(restart 1)" in _read(log)
               and _rounds_written(run) >= first + 2, slurm, job, log)
    slurm.cancel(job, signal_name="USR1")
    state = slurm.wait(job, timeout=JOB_TIMEOUT)
    text = _read(log)
    assert state == "COMPLETED", f"{state}\n{text[-4000:]}\n{slurm.show(job)}"
    assert "Restarts=2" in slurm.show(job), slurm.show(job)
    second = re.search(r"SIGUSR1 received: stopped after round (\d) of 6", text)
    assert second is not None and first < int(second.group(1)) < 6, text[-4000:]
    starts = re.findall(r"\(restart (\d)\) on \S+: (\S+) ?(.*)", text)  # every attempt's log (--open-mode=append)
    assert starts == [("0", str(run), ""), ("1", str(run), f"--resume {run}"), ("2", str(run), f"--resume {run}")]
    check_two_ranks(run)
    records = normalise(run / "metrics.jsonl")
    assert [r["round"] for r in records if r["type"] == "round"] == list(range(7))
    assert records == reference()  # every round record and the final evaluation
