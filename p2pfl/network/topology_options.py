"""The topologies' own parameters as flags of their own: ``--fanout S``, ``--max-degree K``, ``--active K``, ``--inner
NAME`` as well as ``--topology-params fanout=S,...``.

Each flag is declared by the topologies that take it, in their own files (``register_dynamic(flags=...)``,
topologies.dynamic.FLAGS); this module makes them one section of options (a flag, a YAML key and ``cfg.<name>``
each, default unset) and merges what the run gives into the topology's parameters (`params`): a flag the chosen
topology takes joins ``--topology-params`` (the same value in both is accepted, two values are refused in one line);
one it does not take is warned of as ignored (p2pfl.ignored). Topologies a plug-in registers take their parameters
through ``--topology-params``.
"""
from __future__ import annotations

from typing import Any

import topologies
from p2pfl.options import method_options, opt
from topologies.dynamic import FLAGS, flag_owners, takes


def _section() -> type:
    """The section's class: one `opt` field per declared flag, unset by default, typed by its default's type."""
    names = sorted(FLAGS)
    namespace: dict[str, Any] = {
        "__module__": __name__, "__qualname__": "TopologyOptions",
        "__doc__": "The topologies' own parameters as flags (topologies.dynamic.FLAGS).",
        "__annotations__": {name: f"{FLAGS[name][1]} | None" for name in names}}
    for name in names:
        namespace[name] = opt(None, f"{FLAGS[name][0]}; as --topology-params {name}=V too", section="network")
    return type("TopologyOptions", (), namespace)


TopologyOptions = method_options("topology")(_section())


def given(cfg: Any) -> dict[str, Any]:
    """The topology flags the run sets (not None), by name."""
    return {name: getattr(cfg, name) for name in sorted(FLAGS) if getattr(cfg, name, None) is not None}


def params(cfg: Any) -> str | None:
    """--topology-params with the flags the chosen topology takes added (KEY=VALUE,...); as given when no flag is
    set. TopologyError when a flag and --topology-params give one parameter two values."""
    flags = {k: v for k, v in given(cfg).items() if k in takes(cfg.topology)}
    if not flags:
        return cfg.topology_params
    out = topologies.parse_params(cfg.topology_params)
    for name, value in flags.items():
        if name in out and out[name] != value:
            raise topologies.TopologyError(f"--{name.replace('_', '-')} {value} and --topology-params {name}="
                                           f"{out[name]} disagree; give one")
        out[name] = value
    return ",".join(f"{k}={v}" for k, v in out.items())


def unread(cfg: Any, name: str) -> str | None:
    """Why option `name` goes unread by the run's network: a topology flag its topology does not take, --mixing on
    a topology that mixes by its own weights; None otherwise."""
    dynamic = topologies.DYNAMIC.get(topologies.base.canonical(cfg.topology))
    if name == "mixing" and dynamic is not None and dynamic.weighted:
        return f"--topology {cfg.topology} mixes by the weights of its construction"
    if name not in FLAGS or name in takes(cfg.topology):
        return None
    owners = flag_owners(name)
    return f"it is a parameter of topology {', '.join(owners)}, and --topology {cfg.topology} does not take it"
