"""The topology registry and ``build``: one place that validates every generated graph."""
from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any, TypeVar

import networkx as nx

Generator = Callable[..., nx.Graph]
T = TypeVar("T")

registry: dict[str, Generator] = {}


class TopologyError(ValueError):
    """A topology the user asked for cannot be built or used."""


def canonical(name: str) -> str:
    """The registry spelling of a name: lower case, hyphens for underscores (``binary_tree`` -> ``binary-tree``)."""
    return name.strip().lower().replace("_", "-")


def registrar(table: dict[str, T], what: str) -> Callable[[str], Callable[[T], T]]:
    """A decorator factory adding entries to ``table`` under their canonical names (twice is an error)."""

    def register(name: str) -> Callable[[T], T]:
        def deco(fn: T) -> T:
            key = canonical(name)
            if key in table:
                raise TopologyError(f"{what} {key!r} is already registered")
            table[key] = fn
            return fn

        return deco

    return register


#: Decorator adding ``fn(n, seed, **params) -> nx.Graph`` to the registry under a name.
register = registrar(registry, "topology")


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
