"""The console: every message of a run goes through `logging`, the `p2pfl` hierarchy (each module's
`logging.getLogger(__name__)`; analysis's and topologies' loggers are shown alike), to one handler.

Rank 0 shows info (the default), only warnings and errors (--quiet, `simulate(quiet=True)` or
`simulate(verbose=False)`) or debug too (--verbose); other ranks show warnings and errors only, each line prefixed
with its rank, so an MPI job's output is rank 0's. Info is the command's output and goes to stdout (the banner,
the summary); warnings and errors go to stderr, as `p2pfl: warning: ...` lines (`p2pfl: rank R: warning: ...`
elsewhere). A progress bar on the terminal is cleared around each line. The streams are looked up at each line,
so a redirected sys.stdout (a notebook, pytest) gets them.

The last words of a failing process (`p2pfl: error:` of refused input, a rank's traceback, the watchdog's
timeout) are written straight to stderr by p2pfl.runtime.failure and p2pfl.comm.watchdog, whatever the level.
"""
from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

#: The loggers whose messages the console shows (their children: each module's logger).
LOGGERS = ("p2pfl", "analysis", "topologies")
#: The level words of the lines' prefixes (info lines carry none: they are the command's output).
_WORDS = {logging.DEBUG: "debug", logging.WARNING: "warning", logging.ERROR: "error", logging.CRITICAL: "error"}


def verbosity(quiet: bool | None = None, verbose: bool | None = None) -> int:
    """The level rank 0 shows: --quiet warnings and errors, --verbose debug too, neither info; `verbose=False`
    (the Python API's spelling) is quiet. Both at once is a ValueError naming them."""
    if quiet and verbose:
        raise ValueError("--quiet and --verbose: give one of them")
    if quiet or verbose is False:
        return logging.WARNING
    return logging.DEBUG if verbose else logging.INFO


class _Line(logging.Formatter):
    """`p2pfl: <level>: message` (info: the message alone), `p2pfl: rank R: <level>: ` on other ranks."""

    def __init__(self, rank: int) -> None:
        super().__init__()
        self.rank = rank

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        word = _WORDS.get(record.levelno)
        where = f"rank {self.rank}: " if self.rank else ""
        return f"p2pfl: {where}{word}: {text}" if word else (f"p2pfl: {where}{text}" if where else text)


class ConsoleHandler(logging.Handler):
    """Info and below to sys.stdout, warnings and errors to sys.stderr (both looked up at each line), a live
    progress bar cleared around the line. A line is one write, so that ranks sharing a stream (mpirun's) do not
    cut into each other's lines."""

    def __init__(self, rank: int) -> None:
        super().__init__()
        self.setFormatter(_Line(rank))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from tqdm import tqdm

            stream = sys.stderr if record.levelno >= logging.WARNING else sys.stdout
            with tqdm.external_write_mode(file=stream):
                stream.write(self.format(record) + "\n")
                stream.flush()
        except Exception:  # noqa: BLE001 - logging's own way to report a broken stream
            self.handleError(record)


_rank = 0  # the rank the console was last configured for


def configure(rank: int, level: int = logging.INFO) -> None:
    """Show the p2pfl loggers' messages on this rank's console: rank 0 at `level`, the others at warnings and
    errors; replaces what an earlier call set up."""
    global _rank
    _rank = rank
    for name in LOGGERS:
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if isinstance(h, ConsoleHandler)]:
            logger.removeHandler(old)
        logger.addHandler(ConsoleHandler(rank))
        logger.propagate = False  # the line is shown once, in its own format, whatever the root logger does
    set_level(level)


def set_level(level: int) -> None:
    """The level rank 0 shows from now on (other ranks keep to warnings and errors)."""
    for name in LOGGERS:
        logging.getLogger(name).setLevel(level if _rank == 0 else max(level, logging.WARNING))


@contextmanager
def console(rank: int, level: int = logging.INFO) -> Iterator[None]:
    """`configure` for the block, then the loggers as they were (p2pfl.simulate: a library call leaves the
    caller's logging as it found it)."""
    global _rank
    rank_before = _rank
    saved = {name: (logging.getLogger(name).level, list(logging.getLogger(name).handlers),
                    logging.getLogger(name).propagate) for name in LOGGERS}
    configure(rank, level)
    try:
        yield
    finally:
        _rank = rank_before
        for name, (lvl, handlers, propagate) in saved.items():
            logger = logging.getLogger(name)
            logger.setLevel(lvl)
            logger.handlers[:] = handlers
            logger.propagate = propagate
