"""The topology registry and ``build``: one place that validates every generated graph."""
from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import networkx as nx

Generator = Callable[..., nx.Graph]
T = TypeVar("T")

registry: dict[str, Generator] = {}
#: Other names of registered topologies (``ring`` for ``cycle``), static or dynamic: alias -> name, both spelled
#: as `spelled` spells them. `canonical` turns an alias into its name, so a run records one name whichever is given.
ALIASES: dict[str, str] = {}
#: The topologies' parameters that are flags of their own (``--rows R`` as well as ``--topology-params rows=R``):
#: parameter -> (its help line, the type of its values), declared by each topology that takes it
#: (``register(flags=...)``, ``register_dynamic(flags=...)``; p2pfl.network.topology_options makes them options).
FLAGS: dict[str, tuple[str, str]] = {}


class TopologyError(ValueError):
    """A topology the user asked for cannot be built or used."""


def spelled(name: str) -> str:
    """A name as registries spell it: lower case, hyphens for underscores (``binary_tree`` -> ``binary-tree``)."""
    return name.strip().lower().replace("_", "-")


def canonical(name: str) -> str:
    """The registry spelling of a name (`spelled`), an alias replaced by the name it stands for (``ring`` ->
    ``cycle``): what every lookup of a topology goes through."""
    key = spelled(name)
    return ALIASES.get(key, key)


def registrar(table: dict[str, T], what: str) -> Callable[[str], Callable[[T], T]]:
    """A decorator factory adding entries to ``table`` under their names as `spelled` (twice is an error)."""

    def register(name: str) -> Callable[[T], T]:
        def deco(fn: T) -> T:
            key = spelled(name)
            if key in table:
                raise TopologyError(f"{what} {key!r} is already registered")
            table[key] = fn
            return fn

        return deco

    return register


def add_aliases(key: str, aliases: tuple[str, ...], taken: Callable[[str], bool]) -> None:
    """Record `aliases` as other names of topology `key`; TopologyError (nothing recorded) for one that is `taken`
    (a registered name) or another topology's alias (the same again is kept: a plug-in imported twice)."""
    spelt = [spelled(a) for a in aliases]
    clash = next((a for a in spelt if ALIASES.get(a, key) != key or taken(a) or a == key), None)
    if clash is not None:
        raise TopologyError(f"topology {key!r}: alias {clash!r} is already a topology's name or alias")
    ALIASES.update(dict.fromkeys(spelt, key))


def _flag_type(param: inspect.Parameter) -> str:
    """The type name of a flag's values: its default's type, or (a default of None) its annotation's other type."""
    if param.default is not None:
        return type(param.default).__name__
    annotation = param.annotation if isinstance(param.annotation, str) else getattr(param.annotation, "__name__", "")
    return next((p.strip() for p in str(annotation).split("|") if p.strip() not in ("None", "")), "str")


def declare_flags(key: str, fn: Callable[..., Any], flags: Mapping[str, str] | None) -> None:
    """Add topology `key`'s `flags` (parameter -> help line) to FLAGS; TopologyError for one that is no keyword
    parameter of `fn` with a default."""
    takes = inspect.signature(fn).parameters
    for param in flags or {}:
        if param not in takes or takes[param].default is inspect.Parameter.empty:
            raise TopologyError(f"topology {key!r}: flag {param!r} is no keyword parameter of its function")
    for param, help in (flags or {}).items():
        FLAGS.setdefault(param, (help, _flag_type(takes[param])))


def register(name: str, *, aliases: tuple[str, ...] = (), flags: Mapping[str, str] | None = None
             ) -> Callable[[Generator], Generator]:
    """Decorator adding ``fn(n, seed, **params) -> nx.Graph`` to the registry under `name`; `aliases`: other names
    it answers to (``--topology ring``; shown beside it in --help, recorded as `name`); `flags`: its parameters that
    are flags of their own, each with its help line (FLAGS)."""
    add = registrar(registry, "topology")(name)

    def deco(fn: Generator) -> Generator:
        key = canonical(name)
        if key in registry or spelled(name) in ALIASES:
            raise TopologyError(f"topology {spelled(name)!r} is already registered")
        declare_flags(key, fn, flags)
        add_aliases(key, aliases, lambda a: a in registry)
        return add(fn)

    return deco


def names() -> list[str]:
    """The registered topology names, sorted."""
    return sorted(registry)


def check_params(key: str, fn: Callable[..., Any], params: dict[str, Any], fixed: tuple[str, ...] = ("n", "seed")
                 ) -> None:
    """TopologyError unless `fn` takes every keyword in `params` (its parameters after the `fixed` ones)."""
    sig = inspect.signature(fn)
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return
    allowed = [p for p in sig.parameters if p not in fixed]
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise TopologyError(
            f"topology {key!r} does not take {', '.join(unknown)}; it takes: {', '.join(allowed) or 'no parameters'}"
        )


def parse_params(text: str | None) -> dict[str, Any]:
    """A topology's parameters written ``KEY=VALUE[,KEY=VALUE...]`` (``q=0.5,period=3``): each value an int, a
    float, true/false, or else the string as written. TopologyError on a pair without '=' or a key twice."""
    out: dict[str, Any] = {}
    for pair in (text or "").split(","):
        if not pair.strip():
            continue
        key, eq, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not eq or not key.isidentifier():
            raise TopologyError(f"topology parameter {pair.strip()[:40]!r}: expected KEY=VALUE")
        if key in out:
            raise TopologyError(f"topology parameter {key!r} given twice")
        out[key] = _value(value.strip())
    return out


def _value(text: str) -> Any:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for typ in (int, float):
        try:
            return typ(text)
        except ValueError:
            pass
    return text


def build(name: str, n: int, seed: int = 0, **params: Any) -> nx.Graph:
    """Build topology ``name`` on peers 0..n-1 and check it is a simple connected graph.

    Parameters whose value is None are dropped, so callers can pass optional settings unconditionally.
    """
    key = canonical(name)
    if key not in registry:
        raise TopologyError(f"unknown topology {name!r}; known: {', '.join(names())}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise TopologyError(f"topology needs n >= 2 peers (an integer), got {n!r}")
    fn = registry[key]
    params = {k: v for k, v in params.items() if v is not None}
    check_params(key, fn, params)
    raw = fn(n, seed, **params)
    outside = sorted((v for v in raw.nodes if not (isinstance(v, int) and 0 <= v < n)), key=str)
    if outside:
        raise TopologyError(f"topology {key!r} has nodes outside 0..{n - 1}: {outside[:5]}")
    loops = sorted(v for v, _ in nx.selfloop_edges(raw))
    if loops:
        raise TopologyError(f"topology {key!r} has self-loops at nodes {loops[:5]}")
    attrs = {k: (os.fspath(v) if isinstance(v, os.PathLike) else v) for k, v in params.items()}
    graph = nx.Graph(topology=key, **{k: v for k, v in attrs.items() if isinstance(v, (int, float, str))})
    graph.add_nodes_from(range(n))
    graph.add_edges_from(sorted((min(u, v), max(u, v)) for u, v in raw.edges))
    if not nx.is_connected(graph):
        parts = nx.number_connected_components(graph)
        raise TopologyError(f"topology {key!r} on {n} peers is disconnected ({parts} components)")
    return graph
