"""Stop cleanly when the scheduler says so: SIGTERM or SIGUSR1 (what Slurm sends before a preemption, or before
the time limit with `sbatch --signal=B:USR1@120`), and on the command line Ctrl-C (SIGINT), end the run on every
rank with exit status PREEMPTED_EXIT, which a batch script turns into a requeue: at the end of the current round
with a checkpoint, or, when the signal comes in set-up, at set-up's next stop point, before the first round
(p2pfl.run). `python -m p2pfl.run` installs the handlers for the whole process before its imports, so no moment of
a run is left to the signal's default (death by the signal, a point a study marks failed). A second Ctrl-C stops
at once (KeyboardInterrupt)."""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

#: Exit status of every rank of a run stopped by a signal after writing its checkpoint (EX_TEMPFAIL).
PREEMPTED_EXIT = 75
#: The scheduler's stop signals, which a run's rounds always stop on.
SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
#: What the command line stops on besides: Ctrl-C (a library call, p2pfl.simulate, leaves SIGINT to its caller).
COMMAND_LINE_SIGNALS = (*SIGNALS, signal.SIGINT)
#: Testing aid: with a path in this variable, rank 0 creates that file in set-up and waits there until a stop
#: signal arrives, so a test signals a run certainly in set-up (tests/test_preemption.py).
HOLD_ENV = "P2PFL_HOLD_SETUP"


#: The command line's line for a set-up that a stop signal ended before it reached a stop point.
SETUP_FORCED = ("p2pfl: {signal} received in set-up, which had not reached a stop point {grace} s later: stopped "
                f"before the first round; run it again (exit status {PREEMPTED_EXIT})")
#: Its line for a round that had not ended `--stop-grace` seconds after the signal.
ROUND_FORCED = ("p2pfl: {signal} received in a round that had not ended {grace} s later (--stop-grace): stopped "
                f"without its checkpoint; --resume continues from the last one (exit status {PREEMPTED_EXIT})")
#: Seconds a command line's set-up has, after a stop signal, to reach its next stop point before the process
#: ends itself (a set-up step computing at length would otherwise outlive the signal until the scheduler's kill).
SETUP_STOP_GRACE_S = 3.0


class StopSignals:
    """Remembers the first stop signal received; `restore` puts the previous handlers back.

    `watch` gives the stretch under way a grace (the command line's set-up, then its rounds): a stop signal also
    starts a timer, and a process still running that many seconds later runs its cleanup (a new run's folder
    removed), prints the stretch's line and ends at once with PREEMPTED_EXIT. Nothing is lost: set-up writes
    nothing a resume reads, and a round cut short leaves the last checkpoint, which --resume continues from."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, object] = {}
        self._grace: float | None = None
        self._line = ""
        self._cleanup: Callable[[], None] | None = None
        self._timer: threading.Timer | None = None

    @property
    def installed(self) -> bool:
        """Whether its handlers are in place."""
        return bool(self._previous)

    def install(self, signals: tuple[int, ...] = SIGNALS) -> StopSignals:
        self.received = None
        for sig in signals:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
            self._start_timer()
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt

    @property
    def watching(self) -> bool:
        """Whether a stop signal ends the process after a grace (the command line, until its rounds end)."""
        return self._grace is not None

    def watch(self, grace: float | None, line: str = "", cleanup: Callable[[], None] | None = None) -> None:
        """From now on a stop signal ends the process `grace` seconds later unless it has ended (None: never):
        `line` is printed (with the signal's name for {signal}), after `cleanup`. A signal already received
        restarts its timer under the new grace."""
        self._cancel_timer()
        self._grace, self._line, self._cleanup = grace, line, cleanup
        if self.received is not None:
            self._start_timer()

    def _start_timer(self) -> None:
        if self._grace is None:
            return
        self._timer = threading.Timer(self._grace, self._force)
        self._timer.daemon = True
        self._timer.start()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _force(self) -> None:
        cleanup, self._cleanup = self._cleanup, None
        if cleanup is not None:
            with contextlib.suppress(Exception):
                cleanup()
        sys.stderr.write(self._line.format(signal=self.name, grace=f"{self._grace:g}") + "\n")
        sys.stderr.flush()
        os._exit(PREEMPTED_EXIT)

    def restore(self) -> None:
        self.watch(None)
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous = {}
        self.received = None

    @property
    def name(self) -> str:
        return signal.Signals(self.received).name if self.received is not None else "none"


#: The process's stop signals: what set-up's stop points and the rounds read.
STOP = StopSignals()


@contextmanager
def stop_signals(signals: tuple[int, ...] = SIGNALS) -> Iterator[StopSignals]:
    """The process's stop signals held over a block: installed for it, and restored after, unless the process had
    installed them already (`python -m p2pfl.run`, for its whole life), when they are left as they are."""
    if STOP.installed:
        yield STOP
        return
    STOP.install(signals)
    try:
        yield STOP
    finally:
        STOP.restore()


def hold_for_signal(is_root: bool) -> None:
    """With HOLD_ENV set (a testing aid), rank 0 creates its file and waits until a stop signal arrives."""
    path = os.environ.get(HOLD_ENV)
    if path is None or not is_root or not STOP.installed:
        return
    Path(path).touch()
    while STOP.received is None:
        time.sleep(0.01)


def signalled(world: Any) -> str | None:
    """The name of the stop signal a rank of `world` has received (the highest-numbered when several have), None
    when none has; collective, so every rank decides alike."""
    signum = int(world.allreduce_max(float(STOP.received or 0)))
    return signal.Signals(signum).name if signum else None
