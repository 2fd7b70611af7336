"""One writer per run folder: rank 0 holds an exclusive lock on `<run>/.lock` (fcntl.flock) for the run's life;
the system drops it when the process ends, however it ends, so a killed run leaves no stale lock."""
from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

from p2pfl.runtime.files import open_plain

LOCK_FILE = ".lock"


class RunLock:
    """The held lock of a run folder; `release` (or the process's end) lets the next writer in."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    @classmethod
    def acquire(cls, run_dir: str | os.PathLike, option: str) -> RunLock:
        """Lock `run_dir`, or a ValueError naming `option` when another process holds it: it writes nothing then
        (the lock file exists already: the holder made it)."""
        path = Path(run_dir) / LOCK_FILE
        try:
            fd = open_plain(path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:  # a read-only mount, a folder or a link in the lock's place
            reason = exc.strerror or " ".join(str(exc).split())
            raise ValueError(f"{option}: cannot take the run folder's lock {path} ({reason}); a run writes its "
                             "folder, which must be writable and hold only regular files") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise ValueError(f"{option}: {run_dir} is being written by another run ({holder} holds {path}); "
                             "one run at a time writes a run folder: wait for it to end") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        return cls(fd)

    def release(self) -> None:
        """Let the next writer in (once)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
