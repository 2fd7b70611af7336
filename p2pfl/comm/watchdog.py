"""A deadline on blocking waits: when a wait overruns, say who waits for whom and end the job.

Across ranks (`Alarm`): the rank whose deadline passes first tells every other rank on a communicator of its own;
the ranks that wait too answer at once, so every live rank prints its line within a few seconds, and the ranks
that never answer are the ones that did not arrive (stopped, frozen, or still computing).
"""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

TIMEOUT_EXIT = 3  # exit status of a job whose wait (a receive or a collective) ran past --timeout
#: Seconds between two looks of an armed watchdog for another rank's alarm (no look in a shorter wait).
POLL_S = 1.0
#: Seconds a rank whose deadline passed waits for the other ranks' answers.
GRACE_S = 3.0
#: Seconds between a rank's line and its abort: the ranks alarmed up to POLL_S later print theirs first.
SPREAD_S = POLL_S + 1.0
_TAG = 1


@dataclass(frozen=True)
class Expiry:
    """What a rank knows when its wait ends: the seconds it waited, the rank whose deadline passed first (None:
    its own) and the other ranks that never answered the alarm (None: no alarm across ranks)."""

    waited: float
    alerted_by: int | None = None
    silent: tuple[int, ...] | None = None

    def seconds(self) -> str:
        """The seconds waited, to a tenth without trailing zeros (3 -> '3', 2.46 -> '2.5')."""
        return f"{round(self.waited, 1):g}"

    def when(self) -> str:
        """' when rank R timed out' for a rank that was alarmed by another, else ''."""
        return f" when rank {self.alerted_by} timed out" if self.alerted_by is not None else ""

    def absent(self, always: bool = True) -> str:
        """'; ranks that did not arrive: ...' (with `always` False: only when some did not)."""
        if self.silent is None or (not self.silent and not always):
            return ""
        ranks = ", ".join(map(str, self.silent)) or "none (every rank waits in some call)"
        return f"; ranks that did not arrive: {ranks}"


class Alarm:
    """The ranks' alarm over `comm` (a duplicate of the world's, used by nothing else): `ring` tells every other
    rank, `heard` returns a rank that rang (or None), `answers` collects who rang within a grace period."""

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.rang: set[int] = set()
        self._byte = np.zeros(1, dtype=np.uint8)
        self._sent: list[Any] = []  # requests kept alive: a stopped rank never receives its message

    def ring(self) -> None:
        self._sent = [self.comm.Isend([self._byte, MPI.BYTE], dest=r, tag=_TAG)
                      for r in range(self.size) if r != self.rank]

    def heard(self) -> int | None:
        status = MPI.Status()
        if not self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=_TAG, status=status):
            return None
        source = status.Get_source()
        self.comm.Recv([np.empty(1, dtype=np.uint8), MPI.BYTE], source=source, tag=_TAG)
        self.rang.add(source)
        return source

    def answers(self, grace: float) -> tuple[int, ...]:
        """Collect alarms for up to `grace` seconds (less once every other rank rang); the ranks that did not."""
        others = set(range(self.size)) - {self.rank}
        end = time.monotonic() + grace
        while self.rang < others and time.monotonic() < end:
            if self.heard() is None:
                time.sleep(0.05)
        return tuple(sorted(others - self.rang))


class Watchdog:
    """One daemon thread per process; `arm` starts a deadline, `disarm` ends it.

    When a deadline passes (or, with an `alarm`, another rank's did while this one is armed), `describe` (read
    at that moment, given the `Expiry`) is printed as one line and `on_expire` runs (it ends the job). Blocking
    MPI waits stay in MPI's own fast progress loop; only this thread sleeps, and it looks for an alarm about
    once a second of an armed wait that lasts, never in a short one.
    """

    def __init__(self, on_expire: Callable[[str], None], alarm: Alarm | None = None) -> None:
        self._on_expire = on_expire
        self._alarm = alarm
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._armed_at = 0.0
        self._seconds = 0.0
        self._alerted_by: int | None = None
        self._describe: Callable[[Expiry], str] = lambda expiry: ""
        #: The deadlines an `arm` replaced, innermost last (deadline, armed at, seconds, describe).
        self._outer: list[tuple[float | None, float, float, Callable[[Expiry], str]]] = []
        self._thread = threading.Thread(target=self._loop, name="p2pfl-watchdog", daemon=True)
        self._thread.start()

    def arm(self, seconds: float, describe: Callable[[Expiry], str], since: float | None = None) -> None:
        """Start a deadline `seconds` after `since` (a time.monotonic() reading; now by default); the deadline it
        replaces (a set-up step's, around a collective of that step) comes back at `disarm`."""
        with self._cond:
            self._outer.append((self._deadline, self._armed_at, self._seconds, self._describe))
            self._armed_at = time.monotonic() if since is None else since
            self._seconds = seconds
            self._deadline = self._armed_at + seconds
            self._describe = describe
            self._cond.notify()

    def disarm(self) -> None:
        """End the latest deadline; the one it replaced, if any, runs on as it was."""
        with self._cond:
            if self._outer:
                self._deadline, self._armed_at, self._seconds, self._describe = self._outer.pop()
            else:
                self._deadline = None
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._deadline is None:
                    self._cond.wait()
                if self._alerted_by is None and time.monotonic() < self._deadline:
                    self._cond.wait(timeout=min(self._deadline - time.monotonic(), POLL_S))
                    look = (self._alarm is not None and self._deadline is not None
                            and time.monotonic() - self._armed_at >= POLL_S)
                    expired = None
                else:
                    look = False
                    now = time.monotonic()
                    waited = self._seconds if self._alerted_by is None else now - self._armed_at
                    expired = (self._describe, waited, self._alerted_by)
                    self._deadline = None
            if look:
                assert self._alarm is not None
                who = self._alarm.heard()
                if who is not None:
                    with self._cond:
                        self._alerted_by = who
            elif expired is not None:
                self._expire(*expired)

    def _expire(self, describe: Callable[[Expiry], str], waited: float, alerted_by: int | None) -> None:
        silent = None
        if self._alarm is not None:
            self._alarm.ring()
            silent = self._alarm.answers(GRACE_S)
        message = describe(Expiry(waited, alerted_by, silent))
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
        if self._alarm is not None:
            time.sleep(SPREAD_S)
        self._on_expire(message)
