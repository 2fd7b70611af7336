"""One array task of a study on Slurm: `python -m p2pfl.study.job STUDY_DIR [ARRAY_FILE]` (the point is line
SLURM_ARRAY_TASK_ID + 1 of STUDY_DIR/array.txt, or of ARRAY_FILE; a tuned study's final point first makes its
arm's choice from the finished tuning runs, p2pfl.study.selection).

Marks the point as run by this task, runs it through srun (its checkpoint resumed when there is one) with the
output appended to logs/NAME.log, records the exit status, and on exit 75 (stopped by Slurm's signal with a
checkpoint) requeues this task. Signals reach the ranks from Slurm directly; this wrapper waits them out.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys

from p2pfl.runtime.preemption import PREEMPTED_EXIT
from p2pfl.study.folder import StudyFolder
from p2pfl.study.local import point_command


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    folder = StudyFolder(argv[0])
    task = int(os.environ["SLURM_ARRAY_TASK_ID"])
    array = argv[1] if len(argv) > 1 else "array.txt"
    name = (folder.path / array).read_text().splitlines()[task]
    error = _prepare_final(folder, name)
    if error is not None:
        folder.set_job(name, "slurm:none")
        with open(folder.log(name), "ab") as log:
            log.write(f"p2pfl: error: {error}\n".encode())
        folder.end(name, 2)
        return 2
    job = f"{os.environ.get('SLURM_ARRAY_JOB_ID', os.environ.get('SLURM_JOB_ID', '?'))}_{task}"
    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
        signal.signal(sig, lambda *_: None)  # the ranks stop at their round's end; wait for them
    folder.begin(name, f"slurm:{job}")
    ranks = int(os.environ.get("SLURM_NTASKS", "1"))
    # srun's PMI names the MPI job JOBID.STEP and MPICH names its shared memory after it: a rank killed before
    # MPI_Finalize leaves that segment behind, where a requeued attempt's step 0 would fail or hang in MPI_Init.
    # So restart k runs the point as step k, after k empty steps (as launch/slurm.sbatch does).
    for _ in range(int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)):
        subprocess.call(["srun", "--nodes=1", "--ntasks=1", "true"])
    run = point_command(folder, name, ranks=1)  # [python, -m, p2pfl.run, ...]
    cmd = ["srun", "--kill-on-bad-exit=1", f"--ntasks={ranks}", *run]
    with open(folder.log(name), "ab") as log:
        log.write(f"p2pfl.study: {name} as Slurm task {job} on {os.uname().nodename}\n".encode())
        log.flush()
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
        if rc < 0:  # srun itself killed by a signal
            rc = 128 - rc
    folder.end(name, rc)
    if rc == PREEMPTED_EXIT:
        # Stopped by the time-limit or preemption warning (SIGUSR1) the job still runs: requeue it. After SIGTERM
        # (scontrol requeue, a preemption past its grace time) Slurm is already requeuing or ending it.
        shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout
        if "JobState=RUNNING" in shown:
            subprocess.call(["scontrol", "requeue", job])
        return 0
    return rc


def _prepare_final(folder: StudyFolder, name: str) -> str | None:
    """A tuned study's final point: make the choice and write its configuration (None), or say why it cannot be
    made yet (a tuning point not done); nothing for other points."""
    plan_data = folder.plan()
    if "tune" not in plan_data or any(t["name"] == name for t in plan_data.get("tuning", [])):
        return None
    from p2pfl.study.plan import StudyError, load_study
    from p2pfl.study.selection import ensure_finals, waiting_error
    from p2pfl.study.tune import TuneError
    try:
        plan, _ = load_study(folder.path / "study.yaml", root=plan_data.get("root"))
        selection, ready = ensure_finals(folder, plan)
    except (StudyError, TuneError) as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - the task records an exit status whatever went wrong
        return f"{type(exc).__name__}: {exc}"
    return None if name in ready else str(waiting_error(selection))


if __name__ == "__main__":
    sys.exit(main())
