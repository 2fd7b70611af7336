"""Stop cleanly when the scheduler says so: SIGTERM or SIGUSR1 (what Slurm sends before a preemption, or before
the time limit with `sbatch --signal=B:USR1@120`) ends the run at the end of the current round on every rank,
with a checkpoint, and exit status PREEMPTED_EXIT, which a batch script turns into a requeue."""
from __future__ import annotations

import signal
from types import FrameType

#: Exit status of every rank of a run stopped by a signal after writing its checkpoint (EX_TEMPFAIL).
PREEMPTED_EXIT = 75
SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class StopSignals:
    """Remembers the first stop signal received; `restore` puts the previous handlers back."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    def install(self) -> StopSignals:
        for sig in SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous = {}

    @property
    def name(self) -> str:
        return signal.Signals(self.received).name if self.received is not None else "none"
