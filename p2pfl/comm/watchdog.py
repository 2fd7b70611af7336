"""A deadline on blocking waits: when a wait overruns, say who waits for whom and end the job."""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable


class Watchdog:
    """One daemon thread per process; `arm` starts a deadline, `disarm` ends it.

    When a deadline passes, `describe()` (read at that moment) is printed as one line and `on_expire` runs
    (the Exchange's ends the job through `World.abort`). Blocking MPI waits stay in MPI's own fast progress
    loop; only this thread sleeps.
    """

    def __init__(self, on_expire: Callable[[str], None]) -> None:
        self._on_expire = on_expire
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._describe: Callable[[], str] = lambda: ""
        self._thread = threading.Thread(target=self._loop, name="p2pfl-watchdog", daemon=True)
        self._thread.start()

    def arm(self, seconds: float, describe: Callable[[], str]) -> None:
        with self._cond:
            self._deadline = time.monotonic() + seconds
            self._describe = describe
            self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._deadline = None
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._deadline is None:
                    self._cond.wait()
                remaining = self._deadline - time.monotonic()
                if remaining > 0:
                    self._cond.wait(timeout=min(remaining, 1.0))
                    continue
                message = self._describe()
                self._deadline = None
            sys.stderr.write(message + "\n")
            sys.stderr.flush()
            self._on_expire(message)
