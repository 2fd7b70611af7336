"""Plug-ins tried and forgotten: `isolated()` removes, on leaving, everything the plug-ins loaded inside it
registered (a notebook trying plug-ins; the test suite, whose modules each bring their own: tests/conftest.py)."""
from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import topologies
from p2pfl import algorithms, options, plugins, registry
from p2pfl.runtime import hooks


def _tables() -> list[dict[Any, Any]]:
    """Every process-wide table a plug-in can add to: the registries of components (built-ins loaded first), the
    options sections, the methods, the topologies (their aliases and flags), mixing rules and per-round
    topologies, the post-run hooks, and the plug-ins loaded."""
    registry.load_all()
    options.catalogue()
    hooks.hooks()  # the built-in hooks' modules imported: what they register is kept
    kinds = list(registry.KINDS.values())
    return [registry.KINDS, *(r._table for r in kinds), *(r._aliases for r in kinds), options._SECTIONS,
            algorithms._REGISTRY, topologies.registry, topologies.DYNAMIC, topologies.MIXING_KINDS,
            topologies.base.ALIASES, topologies.base.FLAGS, hooks._HOOKS, plugins._LOADED]


@contextmanager
def isolated() -> Iterator[None]:
    """Plug-ins loaded inside are forgotten on leaving: every component, option, method, topology and hook they
    registered is removed and their modules unloaded, so a later load imports them afresh (a notebook trying
    plug-ins, a test suite whose tests each bring their own)."""
    tables = _tables()
    saved = [dict(t) for t in tables]
    before = set(plugins._LOADED)
    try:
        yield
    finally:
        added = [record for spec in set(plugins._LOADED) - before for record in plugins._LOADED[spec]]
        for table, kept in zip(tables, saved):
            table.clear()
            table.update(kept)
        for record in added:
            name = plugins.module_name(record.path) if record.kind == "path" and record.path else record.spec
            sys.modules.pop(name, None)
