"""A study's worker process: `python -m p2pfl.study.worker`, started by p2pfl.study.local's pool. It imports
p2pfl once, then runs one-rank points one after the other, each as `python -m p2pfl.run ARGS` would run it in a
fresh process: the same `p2pfl.run.main`, the same command line in `sys.argv`, its output on the point's log.

Protocol: one JSON line a point on stdin, {"name", "argv", "log"}; one JSON line back on the process's original
stdout when it ends, {"name", "rc", "retire"} (rc as the subprocess's exit status). End of stdin: the worker exits.
A worker that dies mid-point (segfault, OOM, os._exit) simply ends: the pool sees its stdout close.

What a point may leave behind in the process is put back before the next (`fresh_point`): torch's default dtype,
threads, determinism flags and global RNG, numpy's and Python's global RNGs, warnings' once-registries, loggers,
signal handlers, environment, working directory, umask, sys.argv and the peak-memory marks (manifest's
memory_peak: the worker's resident set, what its imports hold, is under every point's peak).
A point that loaded plug-ins retires its worker: their components stay registered in the process.
"""
from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import logging
import os
import random
import signal
import sys
import warnings
from collections.abc import Iterator
from typing import Any

#: Seed of torch's global generator in a fresh process, read by main() as the worker starts; None outside a worker
#: (a point then draws a new seed, as a fresh process does).
_FRESH_TORCH_SEED: int | None = None


def _fflush_c() -> None:
    """Flush C stdio buffers (libraries that printf) before the output is moved to another file."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)


@contextlib.contextmanager
def output_to(path: str, err: str | None = None, python_streams: bool = False) -> Iterator[None]:
    """Within the block, file descriptors 1 and 2 (and so C libraries, and sys.stdout and sys.stderr where they are
    those descriptors) append to `path` (2 to `err` when given), as a subprocess point's output does; the caller's
    own afterwards. `python_streams`: sys.stdout and sys.stderr are replaced too, by line-buffered writers on the
    new descriptors, for a caller whose streams are not the descriptors (pytest's capture)."""
    sys.stdout.flush()
    sys.stderr.flush()
    _fflush_c()
    from p2pfl.runtime.files import open_plain  # a worker imports p2pfl only once it runs a point

    saved = os.dup(1), os.dup(2)
    files = [open_plain(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT) for name in dict.fromkeys((path, err or path))]
    saved_streams = sys.stdout, sys.stderr
    try:
        os.dup2(files[0], 1)
        os.dup2(files[-1], 2)
        if python_streams:
            sys.stdout = open(1, "w", closefd=False, buffering=1)  # noqa: SIM115 - closed below
            sys.stderr = open(2, "w", closefd=False, buffering=1)  # noqa: SIM115
        yield
    finally:
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            with contextlib.suppress(Exception):
                stream.flush()
        if python_streams:
            for stream in (sys.stdout, sys.stderr):
                stream.close()
            sys.stdout, sys.stderr = saved_streams
        _fflush_c()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, *files):
            os.close(fd)


def _logging_state() -> list[tuple[logging.Logger, int, list[logging.Handler], bool, bool]]:
    loggers = [logging.getLogger(), *(lg for lg in logging.Logger.manager.loggerDict.values()
                                      if isinstance(lg, logging.Logger))]
    return [(lg, lg.level, list(lg.handlers), lg.propagate, lg.disabled) for lg in loggers]


@contextlib.contextmanager
def fresh_point(argv0: str, argv: list[str]) -> Iterator[None]:
    """Run the block as a fresh `python -m p2pfl.run` process would (see the module's docstring) and put back what
    it changed in the process."""
    import numpy as np
    import torch

    from p2pfl.runtime.device import kept_torch_settings

    env, cwd, mask = dict(os.environ), os.getcwd(), os.umask(0)
    os.umask(mask)
    old_argv, streams, dtype = sys.argv, (sys.stdout, sys.stderr), torch.get_default_dtype()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)}
    loggers = _logging_state()
    if _FRESH_TORCH_SEED is None:
        torch.seed()
    else:
        torch.manual_seed(_FRESH_TORCH_SEED)  # torch.manual_seed seeds every CUDA device too
    np.random.seed()  # a fresh process's numpy and random draw their seeds from the OS
    random.seed()
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # the peak RSS (ru_maxrss) starts again from the worker's resident set
    if torch.cuda.is_initialized():  # the CUDA peak (manifest's memory_peak on a GPU) starts again too
        for device in range(torch.cuda.device_count()):
            torch.cuda.reset_peak_memory_stats(device)
    sys.argv = [argv0, *argv]
    try:
        with warnings.catch_warnings(), kept_torch_settings():  # catch_warnings empties the once-registries
            yield
    finally:
        sys.argv, (sys.stdout, sys.stderr) = old_argv, streams
        torch.set_default_dtype(dtype)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        for lg, level, hs, propagate, disabled in loggers:
            lg.setLevel(level)
            for added in [h for h in lg.handlers if h not in hs]:
                added.close()
            lg.handlers[:] = hs
            lg.propagate, lg.disabled = propagate, disabled
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        os.umask(mask)
        gc.collect()
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()


def run_point(argv: list[str], log: str) -> int:
    """Run one point (`python -m p2pfl.run` `argv`) in this process with its output on `log`; its exit status."""
    import p2pfl.run

    with output_to(log), fresh_point(p2pfl.run.__file__, argv):
        return exit_status(argv)


def exit_status(argv: list[str]) -> int:
    """`p2pfl.run.main(argv)` in this process, ended as `python -m p2pfl.run` ends: its exit status, what a
    SystemExit says on stderr, an uncaught exception's traceback and status 1."""
    import p2pfl.run

    try:
        return int(p2pfl.run.main(argv) or 0)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return int(exc.code or 0)
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001 - as an uncaught exception ends `python -m`: traceback, status 1
        import traceback
        traceback.print_exc()
        return 1


def serve(commands: Any, replies: Any) -> None:
    """Run the points read from `commands` one at a time, a reply line each, until end of input."""
    from p2pfl import plugins

    for line in commands:
        request = json.loads(line)
        rc = run_point(request["argv"], request["log"])
        retire = bool(plugins._LOADED)
        replies.write(json.dumps({"name": request["name"], "rc": rc, "retire": retire}) + "\n")
        replies.flush()
        if retire:
            return


def main() -> int:
    global _FRESH_TORCH_SEED
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # stray output between points goes to stderr, never into the replies
    import torch

    import p2pfl.run  # noqa: F401 - the imports each subprocess point would pay, paid once

    _FRESH_TORCH_SEED = torch.initial_seed()
    try:
        serve(sys.stdin, replies)
    except BrokenPipeError:  # the study's runner went away
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
