"""A researcher's own components from their own files: `--plugin PATH.py` or `--plugin package.module`.

A plug-in is a Python file or an importable module that registers components with the decorators the built-ins
use (`@SCHEMES.register(...)`, `@register_method(...)`, `@method_options(...)`, ...). It is imported before the
configuration is read, so its options are flags and YAML keys and its names are choices like the built-ins'.

- Each is imported once per process, in the order given: a file under a module name derived from its resolved
  path (`p2pfl_plugin_<stem>_<digest>`: the same on every rank, so a second load is a no-op and its classes pickle
  alike on every rank); `sys.path` is left as it was. A module by its name, as `import` would.
- `entry-points` loads every entry point of the group `p2pfl.plugins` of the installed distributions, in name
  order (a module, or a function called once with no argument). Only when asked: an installed package never
  changes a run silently.
- A relative path is resolved against the folder of the file that names it (a YAML `--config`, a study file),
  else the working directory; the configuration records the resolved spec (`cfg.plugins`), the manifest a
  `Plugin` record each: spec, kind, resolved path and the sha256 of its source.
- A plug-in that cannot be found or raises while importing is a `PluginError`: one line naming `--plugin`, the
  spec, and the exception's type and first line (exit 2 on every rank, like any bad option).
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: The spec that loads the installed distributions' entry points.
ENTRY_POINTS = "entry-points"
#: Their group.
GROUP = "p2pfl.plugins"

_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


class PluginError(ValueError):
    """A plug-in that cannot be loaded; the message is one line naming `--plugin` and the spec."""


@dataclass(frozen=True)
class Plugin:
    """What the manifest records of a loaded plug-in."""

    spec: str  # as the configuration records it: an absolute path, a module name, or entry-points:NAME
    kind: str  # "path", "module" or "entry-point"
    path: str | None  # the resolved source file (None for a namespace package)
    sha256: str | None  # of that file's bytes

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: Every plug-in loaded in this process, by its resolved spec (entry-points: by `entry-points`), in load order.
_LOADED: dict[str, list[Plugin]] = {}


def is_path(spec: str) -> bool:
    """Whether a spec names a file (ends in .py or holds a path separator) rather than a module."""
    return spec.endswith(".py") or "/" in spec or os.sep in spec


def resolve_spec(spec: Any, base: str | Path | None = None) -> str:
    """The spec as the configuration records it: a path made absolute against `base` (default: the working
    directory), a module name or `entry-points` as given; PluginError for what is neither."""
    if not isinstance(spec, str) or not spec.strip():
        raise PluginError(f"--plugin: expected a PATH.py or a package.module, got {spec!r}")
    spec = spec.strip()
    if is_path(spec):
        path = Path(spec).expanduser()
        return str((Path(base) / path if base is not None and not path.is_absolute() else path).resolve())
    if spec == ENTRY_POINTS or _MODULE.fullmatch(spec):
        return spec
    raise PluginError(f"--plugin {spec}: neither a file (PATH.py) nor a module name (package.module)")


def specs(value: Any, base: str | Path | None = None) -> tuple[str, ...]:
    """The resolved specs of an option's value (None, one spec, or a list of them), each once, in order."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise PluginError(f"--plugin: expected a list of PATH.py or package.module, got {type(value).__name__}")
    return tuple(dict.fromkeys(resolve_spec(item, base) for item in items))


def load(values: Iterable[str], base: str | Path | None = None) -> list[Plugin]:
    """Import the plug-ins `values` names (each resolved against `base`) in order, each once per process; their
    records, in order."""
    return [record for spec in specs(list(values), base) for record in _load_one(spec)]


def loaded(resolved: Iterable[str]) -> list[Plugin]:
    """The records of plug-ins already loaded, by their resolved specs (the manifest's `plugins`)."""
    return [record for spec in resolved for record in _LOADED.get(spec, [])]


def check_unchanged(run_dir: str | Path, resolved: Iterable[str]) -> None:
    """A resumed run's plug-ins against the digests its manifest recorded: PluginError naming the first whose
    source changed since (the run would not continue the same computation). A run without a manifest passes."""
    try:
        recorded = json.loads((Path(run_dir) / "manifest.json").read_text()).get("plugins") or []
        then = {r["spec"]: r["sha256"] for r in recorded}
    except (OSError, ValueError, AttributeError, TypeError, KeyError):
        return
    for record in loaded(resolved):
        if record.spec in then and then[record.spec] != record.sha256:
            raise PluginError(f"--plugin {record.spec}: changed since the run in {run_dir} began (sha256 "
                              f"{str(then[record.spec])[:12]}... then, {str(record.sha256)[:12]}... now); resume with "
                              "the same source")


def _load_one(spec: str) -> list[Plugin]:
    if spec not in _LOADED:
        if spec == ENTRY_POINTS:
            _LOADED[spec] = _entry_points()
        else:
            _LOADED[spec] = [_import_path(spec) if is_path(spec) else _import_module(spec)]
    return _LOADED[spec]


#: What a plug-in's import may raise that is one line naming it: anything its code raises, an exit and a
#: KeyboardInterrupt it raises itself included (a Ctrl-C of `python -m p2pfl.run` is a stop signal, not this).
PLUGIN_FAULTS = (Exception, SystemExit, KeyboardInterrupt)


def _fail(spec: str, exc: BaseException) -> PluginError:
    lines = str(exc).strip().splitlines()
    return PluginError(f"--plugin {spec}: {type(exc).__name__}" + (f": {lines[0]}" if lines else ""))


def _digest(path: str | None) -> str | None:
    if path is None or not os.path.isfile(path):
        return None
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def module_name(path: str) -> str:
    """The stable module name a plug-in file is imported under (the same on every rank and every load)."""
    stem = re.sub(r"\W", "_", Path(path).stem)
    return f"p2pfl_plugin_{stem}_{hashlib.sha256(path.encode()).hexdigest()[:12]}"


def _import_path(path: str) -> Plugin:
    if not os.path.isfile(path):
        raise PluginError(f"--plugin {path}: file not found")
    name = module_name(path)
    if name not in sys.modules:
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise PluginError(f"--plugin {path}: not a Python source file")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module  # before running it: dataclasses and pickling look the module up by name
        try:
            module_spec.loader.exec_module(module)
        except PLUGIN_FAULTS as exc:  # noqa: BLE001 - any failure of the researcher's code is one line
            del sys.modules[name]
            raise _fail(path, exc) from exc
    return Plugin(spec=path, kind="path", path=path, sha256=_digest(path))


def _import_module(spec: str) -> Plugin:
    try:
        module = importlib.import_module(spec)
    except ModuleNotFoundError as exc:
        if exc.name is not None and spec.startswith(exc.name):
            raise PluginError(f"--plugin {spec}: no module named {exc.name!r}") from exc
        raise _fail(spec, exc) from exc
    except PLUGIN_FAULTS as exc:  # noqa: BLE001
        raise _fail(spec, exc) from exc
    path = getattr(module, "__file__", None)
    return Plugin(spec=spec, kind="module", path=path and str(Path(path).resolve()), sha256=_digest(path))


def _entry_points() -> list[Plugin]:
    records = []
    for entry in sorted(importlib.metadata.entry_points(group=GROUP), key=lambda e: e.name):
        spec = f"{ENTRY_POINTS}:{entry.name}"
        try:
            target = entry.load()
            if entry.attr is not None and callable(target):
                target()
        except PLUGIN_FAULTS as exc:  # noqa: BLE001
            raise _fail(f"{spec} ({entry.value})", exc) from exc
        path = getattr(sys.modules.get(entry.module), "__file__", None)
        records.append(Plugin(spec=spec, kind="entry-point", path=path and str(Path(path).resolve()),
                              sha256=_digest(path)))
    return records


def scan_argv(argv: Iterable[str]) -> tuple[list[str], str | None, str | None]:
    """The `--plugin` values, the `--config` file and the `--resume` folder a command line names (read before
    the parser is built, since a plug-in may add options and choices to it); stops at `--`."""
    found: dict[str, list[str]] = {"--plugin": [], "--config": [], "--resume": []}
    items = list(argv)
    for i, item in enumerate(items):
        if item == "--":
            break
        flag, eq, value = item.partition("=")
        if flag in found:
            if eq:
                found[flag].append(value)
            elif i + 1 < len(items):
                found[flag].append(items[i + 1])
    last = {k: (v[-1] if v else None) for k, v in found.items()}
    return found["--plugin"], last["--config"], last["--resume"]
