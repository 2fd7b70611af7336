"""No hang, ever: a failing rank prints its traceback once and ends the whole job; bad input ends it cleanly."""
from __future__ import annotations

import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

from p2pfl.comm.world import World, function_name

T = TypeVar("T")
USER_ERROR_EXIT = 2
#: Inside `raising_user_errors()`, bad input agreed on by `agree` is raised, not an exit (a library call).
_RAISE: ContextVar[bool] = ContextVar("p2pfl_raise_user_errors", default=False)


class UserError(ValueError):
    """Bad input every rank agreed on: the one line the command line prints after 'p2pfl: error: '."""


#: What reading a named input (a data file, a trace, a study's plan) may raise that is the input's fault, not
#: p2pfl's: `reading` turns each into one line naming the input. JSONDecodeError and UnicodeDecodeError are
#: ValueErrors; FileNotFoundError and PermissionError are OSErrors.
INPUT_FAULTS: tuple[type[BaseException], ...] = (OSError, EOFError, RecursionError, TypeError, OverflowError,
                                                  MemoryError, KeyError, IndexError, ValueError)


def input_fault_line(name: str, exc: BaseException) -> str:
    """One line: the input's name, the exception's type and its first line (ValueError's own words alone)."""
    text = " ".join(str(exc).split())
    if isinstance(exc, RecursionError):
        text = "nested too deeply to read"
    elif isinstance(exc, MemoryError):
        text = "too large to hold in memory"
    if type(exc) is ValueError:
        return f"{name}: {text}" if not text.startswith(name) else text
    return f"{name}: {type(exc).__name__}: {text[:300]}" if text else f"{name}: {type(exc).__name__}"


@contextmanager
def reading(name: str) -> Iterator[None]:
    """Within the block, what INPUT_FAULTS a named input's reader raises becomes a ValueError of one line naming
    `name` (the option and file), the error `agree` turns into a clean exit on every rank."""
    try:
        yield
    except INPUT_FAULTS as exc:
        raise ValueError(input_fault_line(name, exc)) from exc


@contextmanager
def raising_user_errors() -> Iterator[None]:
    """Within the block, `agree` raises UserError on bad input instead of ending the process (p2pfl.simulate)."""
    token = _RAISE.set(True)
    try:
        yield
    finally:
        _RAISE.reset(token)


def abort_on_exception(world: World, exc: BaseException) -> None:
    """Print which rank failed and its traceback, then end every rank of the job."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    sys.stderr.write(f"p2pfl: rank {world.rank} on {world.host} failed:\n{text}")
    sys.stderr.flush()
    if world.size > 1:
        world.abort(1)
    sys.exit(1)


class UserExit(SystemExit):
    """The exit (USER_ERROR_EXIT) of a run refused on bad input, holding the line printed, for summary.json."""

    def __init__(self, message: str) -> None:
        super().__init__(USER_ERROR_EXIT)
        self.message = message


def user_error_exit(world: World, message: str) -> None:
    """One line on rank 0, a non-zero exit on every rank."""
    if world.is_root:
        sys.stderr.write(f"p2pfl: error: {message}\n")
        sys.stderr.flush()
    raise UserExit(message)


def agree(world: World, step: Callable[[], T]) -> T:
    """Run a set-up step on every rank; if any rank hits bad input (a ValueError), all ranks exit cleanly (inside
    `raising_user_errors()`: all raise UserError with the message instead).

    Collective: every rank must call it at the same point. The first failing rank's message is printed once.
    The step runs under the world's deadline (World.computing): a step that computes past --timeout ends the job.
    """
    error: str | None = None
    result = None
    caller = function_name(sys._getframe(1).f_code)
    try:
        with world.computing(caller):
            result = step()
    except ValueError as exc:
        error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    errors = world.allgather(error, caller=f"agree in {caller}")
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        if _RAISE.get():
            raise UserError(first)
        user_error_exit(world, first)
    return result  # type: ignore[return-value]
