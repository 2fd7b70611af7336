"""Run a study's points as one Slurm job array: one array task per point, `%` throttle, requeued on preemption.

`submit` writes STUDY/array.txt (the points to run, one per line: task i runs line i + 1) and submits
launch/study.sbatch over it; each task runs `python -m p2pfl.study.job STUDY NAME`, which marks the point, runs
it through `srun` (resuming from its checkpoint when it has one) with its output appended to logs/NAME.log, and
records the exit status. A point stopped by a signal (exit 75: Slurm's preemption notice or time-limit warning)
requeues its task, which then resumes.
"""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from p2pfl.runtime.files import write_atomic
from p2pfl.study.folder import StudyFolder

TEMPLATE = Path(__file__).resolve().parents[2] / "launch" / "study.sbatch"
#: Array tasks at once unless the study's slurm section or --throttle says otherwise.
DEFAULT_THROTTLE = 16


def sbatch_command(folder: StudyFolder, names: list[str], ranks: int, options: dict[str, Any],
                   throttle: int | None = None, extra: list[str] | None = None,
                   template: Path = TEMPLATE) -> list[str]:
    """The sbatch command line of the array over `names` (the study's slurm options as --key=value)."""
    options = dict(options)
    configured = int(options.pop("throttle", DEFAULT_THROTTLE))
    throttle = throttle or configured
    cmd = ["sbatch", "--parsable", f"--array=0-{len(names) - 1}%{throttle}",
           f"--job-name=p2pfl-{folder.path.name}", f"--ntasks={ranks}",
           f"--output={folder.path / 'logs' / 'slurm-%A_%a.out'}"]
    for key, value in options.items():
        flag = "--" + str(key).replace("_", "-")
        cmd.append(flag if value is True else f"{flag}={value}")
    return [*cmd, *(extra or []), str(template), str(folder.path.resolve())]


def submit(folder: StudyFolder, names: list[str], ranks: int, options: dict[str, Any],
           throttle: int | None = None, extra: list[str] | None = None, array: str = "array.txt") -> str:
    """Write the `array` file (default array.txt) and submit the array over it; returns the job id
    (`sbatch_command` alone says the command and writes nothing: --dry-run)."""
    write_atomic(folder.path / array, "".join(f"{n}\n" for n in names))
    cmd = sbatch_command(folder, names, ranks, options, throttle, extra)
    if array != "array.txt":
        cmd.append(array)
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"sbatch failed: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ''}")
    return out.stdout.strip().split(";")[0]
