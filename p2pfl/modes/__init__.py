"""The run modes (--mode): how a run proceeds in time, a registry of classes, one file each. A mode holds its rules
on the rest of the configuration (`check`), whether it needs the simulated clock (`keeps_clock`), the networks it
runs on (`check_network`) and the runner that drives it (`runner`).

This module imports nothing heavy: the configuration reads the registry's names for `--mode`'s choices.
"""
from __future__ import annotations

import importlib
from typing import Any, ClassVar

from p2pfl.registry import Component, Registry

MODES: Registry[Any] = Registry("run mode", option="mode", package="p2pfl.modes")


class Mode(Component):
    """A run mode: the rules it sets (`check`, a classmethod), and what the run asks of it."""

    #: The runner class that drives the run, as "module:Class" (imported when run: the configuration reads the
    #: modes without the runners and their torch).
    runs_with: ClassVar[str] = ""

    @classmethod
    def keeps_clock(cls, cfg: Any) -> bool:
        """Whether the mode needs the simulated clock whatever the time options say (p2pfl.config.RunConfig.clock)."""
        return False

    @classmethod
    def check_network(cls, cfg: Any, schedule: Any) -> None:
        """Refuse, in a ValueError of one line naming --mode, a network the mode cannot run on (any, by default)."""

    @classmethod
    def runner(cls) -> type:
        """The runner class that drives the run (p2pfl.runner.Runner's interface): built as runner(ctx, algorithm)."""
        if not cls.runs_with:
            raise NotImplementedError(f"run mode {cls.name!r} gives no runner")
        module, _, name = cls.runs_with.partition(":")
        return getattr(importlib.import_module(module), name)


__all__ = ["MODES", "Mode"]
