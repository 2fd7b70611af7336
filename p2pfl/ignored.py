"""The options a run was given but does not read, each with why: `--mu` for fedavg, `--alpha` with `--partition
iid`, `--lr` for consensus. A value the run never uses is accepted silently by nothing: the run warns, once, on
rank 0, and the manifest lists them (`ignored_options`).

Three rules, each asked of the part that knows:
- a component's own options (a registry's `Options`: `--alpha` of `dirichlet`, `--qsgd-levels` of `qsgd`) are read
  only when the run selects that component (or one deriving its options from it);
- a method's own section (p2pfl.options: `moon`'s `mu`, `dec-ssl`'s `temperature`) is read by that method and the
  methods deriving from it, and by any method that `borrows` the option (fedprox borrows `mu`);
- a method's `ignores` (p2pfl.method.Algorithm) names core options it never reads, with why (consensus trains
  nothing, so `--lr` is ignored), inherited by the methods deriving from it;
- a topology's own flag (`--fanout`) is read only by the topologies that take it, and `--mixing` not by a topology
  that gives its own weights (base: p2pfl.network.topology_options.unread).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from p2pfl.network.topology_options import unread as unread_network_option
from p2pfl.options import catalogue, sections
from p2pfl.registry import KINDS, options_class


def ignored_options(cfg: Any, given: Iterable[str]) -> tuple[str, ...]:
    """One line per option in `given` (set by the user) that the run `cfg` does not read, in the given order."""
    method = catalogue().get(cfg.algorithm, cfg)
    why: dict[str, str] = {}
    for name in given:
        reason = (method.ignores.get(name) or _unread_component_option(cfg, name)
                  or unread_method_option(method, name) or unread_network_option(cfg, name))
        if reason:
            why[name] = reason
    return tuple(f"--{name.replace('_', '-')} is ignored: {reason}" for name, reason in why.items())


def _unread_component_option(cfg: Any, name: str) -> str | None:
    """Why `name` goes unread when it is a component's option and the run selects no component reading it."""
    method = catalogue().get(cfg.algorithm, cfg)
    for registry in KINDS.values():
        if registry.option is None:
            continue
        owners = [n for n, cls in registry.classes().items() if _declares(cls, name)]
        if not owners:
            continue
        if registry.option in method.ignores:
            return method.ignores[registry.option]
        selected = registry.selected(cfg)
        if selected is not None and _declares(selected, name):
            return None
        value = getattr(cfg, registry.option, None)
        return (f"it is an option of {registry.kind} {_listed(owners)}, and --{registry.option.replace('_', '-')} "
                f"is {value}")
    return None


def _declares(component: type, name: str) -> bool:
    options = options_class(component)
    return options is not None and name in {f.name for f in dataclasses.fields(options)}


def unread_method_option(method: type, name: str) -> str | None:
    """Why `name` goes unread when it is another method's own option (a section named after a method)."""
    methods = catalogue()
    for section_name, section in sections().items():
        if section_name not in methods.names() or name not in section.__dataclass_fields__:
            continue
        owner = methods.get(section_name)
        if issubclass(method, owner) or name in method.borrows:
            return None
        readers = [m for m in methods.names() if name not in methods.get(m).ignores
                   and (issubclass(methods.get(m), owner) or name in methods.get(m).borrows)]
        return f"it is an option of {_listed(readers)}, and --algorithm {method.name} does not read it"
    return None


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
