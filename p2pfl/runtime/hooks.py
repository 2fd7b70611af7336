"""Post-run hooks: what rank 0 does with a finished run's folder through code p2pfl does not import, such as drawing
its plots (analysis registers its plotter here; the border between the two is the run folder's layout).

A hook is a function of the run folder registered under a name with `@after_run(name)`; the modules of HOOK_MODULES
register the built-in ones and are imported when a run first asks (never at p2pfl's import); a plug-in registers
its own the same way. A hook runs when the run's boolean option of its name is on (`--plots` runs "plots"; a hook
that no option names always runs), after the run's records are complete. An error in a hook propagates, as a
failed plot did before hooks: the caller closes the folder and the job ends with the traceback.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

Hook = Callable[[Path], None]

#: The modules that register the built-in post-run hooks: analysis draws the plots (--plots).
HOOK_MODULES: tuple[str, ...] = ("analysis.hooks",)

_HOOKS: dict[str, Hook] = {}


def after_run(name: str) -> Callable[[Hook], Hook]:
    """Decorator: register `fn(run_dir)` as the post-run hook `name` (a name taken by another function is an
    error; the same function registered again, a module imported twice, replaces itself)."""
    def register(fn: Hook) -> Hook:
        known = _HOOKS.get(name)
        if known is not None and (known.__module__, known.__qualname__) != (fn.__module__, fn.__qualname__):
            raise ValueError(f"post-run hook {name!r} is already registered ({known.__module__})")
        _HOOKS[name] = fn
        return fn
    return register


def hooks() -> dict[str, Hook]:
    """Every registered hook by name, in registration order (the built-ins' modules imported first)."""
    for module in HOOK_MODULES:
        importlib.import_module(module)
    return dict(_HOOKS)


def run_hooks(run_dir: Path, cfg: Any) -> list[str]:
    """Call, in registration order, every hook the configuration turns on (rank 0 only); returns their names."""
    called = []
    for name, hook in hooks().items():
        if getattr(cfg, name, True):
            hook(run_dir)
            called.append(name)
    return called
