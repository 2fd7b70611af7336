"""Registries of components: every kind of part a run is assembled from is a `Registry` of classes, one file per
component, and a researcher's own components (p2pfl.plugins) register with the same decorator the built-ins use.

A kind (gossip schemes, codecs, aggregators, attacks, clock network models, dynamic topologies, datasets, models,
...) is one `Registry`, made in the package that holds its built-ins: ``SCHEMES = Registry("gossip scheme",
option="gossip", package="p2pfl.gossip.schemes")``. Its built-ins are found by importing every module of
`package` the first time a name is asked for, so adding a component is adding a file; nothing else lists it.

A component is a class registered with ``@SCHEMES.register("qgm")``. It may declare, next to its code:
- `Options`: a class of `p2pfl.options.opt` fields, its own flags and YAML keys (registered as an options section
  named after the component, shown in `--help`; read as `cfg.<option>`);
- `capabilities`: a frozenset of words other parts ask about (`registry.capable(...)`) instead of testing names;
- `check(cfg, check)`: its rules on the rest of the configuration, run when a run selects it
  (`check(ok, option, message)` raises the one-line ConfigError "--option: message"), and
  `check_resolved(cfg, check)`: those that need the peer count (run by `config.resolve`, `cfg.peers` a number);
- whatever its kind's base class asks for (its records, its round).

A component may take an argument in its name (``register("npz", argument="PATH")``: ``--dataset npz:/data/x.npz``
selects it, `get` returns it bound to the argument as `cls.argument`, `--help` shows ``npz:PATH``).

This module imports nothing heavy (no torch): the configuration reads the registries' names for `--help`.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Generic, TypeVar

from p2pfl.options import Check, method_options

C = TypeVar("C", bound=type)

#: Every registry by its kind, in the order they were made (`--help KIND`, docs/extending.md).
KINDS: dict[str, Registry[Any]] = {}


class UnknownComponent(ValueError):
    """A name no component of a kind is registered under; the message is one line naming the option."""


class Component:
    """The optional base of a component: the attributes every registry reads, with their defaults."""

    #: The registered name (set by `Registry.register`).
    name: ClassVar[str] = ""
    #: The kind's registry (set by `Registry.register`).
    kind: ClassVar[str] = ""
    #: Words other parts ask about (`capable`), instead of testing a component's name.
    capabilities: ClassVar[frozenset[str]] = frozenset()
    #: Where its defaults come from, when a paper (shown in `--help KIND`).
    paper: ClassVar[str | None] = None

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        """Its rules on the rest of a run's configuration (called only when the run selects it)."""

    @classmethod
    def check_resolved(cls, cfg: Any, check: Check) -> None:
        """Its rules that need the run completed for its world size (`cfg.peers` a number): called by
        `config.resolve` when the run selects it, after `check`."""


def _canonical(name: str) -> str:
    return name.strip().lower().replace("_", "-")


class Registry(Generic[C]):
    """Named component classes of one kind; built-ins imported from `package` when first needed."""

    def __init__(self, kind: str, option: str | None = None, package: str | None = None) -> None:
        self.kind = kind
        self.option = option  # the configuration option that names the run's component, if one does
        self.package = package
        self._table: dict[str, type] = {}
        self._aliases: dict[str, str] = {}
        self._arguments: dict[str, str] = {}  # name -> how --help shows its argument (npz -> PATH)
        self._bound: dict[str, type] = {}  # "npz:/x.npz" -> the class bound to its argument
        self._loaded = package is None
        self._loading = False
        if kind in KINDS:
            raise ValueError(f"two registries of kind {kind!r}")
        KINDS[kind] = self

    def register(self, name: str, *, aliases: tuple[str, ...] = (), argument: str | None = None) -> Callable[[C], C]:
        """Class decorator: register the class under `name` (twice is an error), with its `Options` section.

        With `argument` ("PATH") the component is named with an argument, ``name:ARGUMENT`` (``npz:/data/x.npz``;
        `--help` shows ``npz:PATH``): `get` returns the class bound to it, a subclass whose `argument` it is.
        """
        key = _canonical(name)
        if ":" in key or (argument is not None and not argument):
            raise ValueError(f"{self.kind} {name!r}: a name holds no ':' and an argument is shown by a word")

        def deco(cls: C) -> C:
            if key in self._table or key in self._aliases:
                same = self._table.get(key)
                if same is not None and (same.__module__, same.__qualname__) == (cls.__module__, cls.__qualname__):
                    self._table[key] = cls  # the same file imported again (a plug-in by path, twice)
                    return cls
                raise ValueError(f"{self.kind} {key!r} is already registered")
            cls.name = key
            cls.kind = self.kind
            options = cls.__dict__.get("Options")
            if options is not None:
                cls.Options = method_options(f"{self.kind}: {key}")(options)
            self._table[key] = cls
            self._arguments.pop(key, None)  # (a forgotten plug-in's, p2pfl.plugin_scope)
            if argument is not None:
                self._arguments[key] = argument
            for alias in aliases:
                self._aliases[_canonical(alias)] = key
            return cls

        return deco

    def load(self) -> None:
        """Import every module of the built-ins' package once (each registers what it holds)."""
        if self._loaded or self._loading:
            return
        self._loading = True
        try:
            assert self.package is not None
            pkg = importlib.import_module(self.package)
            for info in pkgutil.iter_modules(getattr(pkg, "__path__", []), self.package + "."):
                if not info.name.rsplit(".", 1)[-1].startswith("_"):
                    importlib.import_module(info.name)
            self._loaded = True
        finally:
            self._loading = False

    def names(self) -> list[str]:
        """The registered names, built-ins in file order, then plug-ins in the order they registered."""
        self.load()
        return list(self._table)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __contains__(self, name: object) -> bool:
        """Whether `name` names a component: a registered name, or ``name:ARGUMENT`` for one taking an argument
        (whose bare name is not enough)."""
        if not isinstance(name, str):
            return False
        key, argument = self._split(self.resolve(name))
        return key in self._table and (argument is not None) == (key in self._arguments) and argument != ""

    def resolve(self, name: str) -> str:
        """The registered spelling of `name` (aliases and `_` for `-` accepted; an argument kept as written)."""
        self.load()
        head, colon, argument = name.partition(":")
        key = _canonical(head)
        return self._aliases.get(key, key) + colon + argument

    @staticmethod
    def _split(key: str) -> tuple[str, str | None]:
        head, colon, argument = key.partition(":")
        return head, argument if colon else None

    def choices(self) -> list[str]:
        """The names as an option's choices: ``npz:PATH`` for one taking an argument; `in` is the registry's."""
        return _Choices(self)

    def get(self, name: str) -> C:
        """The class registered under `name` (bound to its argument for ``name:ARGUMENT``); UnknownComponent
        naming the option and what is allowed."""
        key, argument = self._split(self.resolve(name))
        if key not in self._table or (argument is not None and (key not in self._arguments or not argument)):
            where = f"--{self.option.replace('_', '-')}: " if self.option else ""
            raise UnknownComponent(f"{where}unknown {self.kind} {name!r}; allowed: {', '.join(self.choices())}")
        cls = self._table[key]
        if argument is None:
            return cls  # type: ignore[return-value]
        bound = self._bound.get(f"{key}:{argument}")
        if bound is None or bound.__bases__[0] is not cls:  # made once per argument (the same class every time)
            bound = type(cls.__name__, (cls,), {"argument": argument, "__module__": cls.__module__,
                                                "__qualname__": cls.__qualname__, "__doc__": cls.__doc__})
            self._bound[f"{key}:{argument}"] = bound
        return bound  # type: ignore[return-value]

    def classes(self) -> dict[str, C]:
        """Every registered name with its class (unbound: a component taking an argument as registered)."""
        self.load()
        return dict(self._table)  # type: ignore[arg-type]

    def capable(self, capability: str) -> list[str]:
        """The names of the components that declare `capability`."""
        self.load()
        return [n for n, cls in self._table.items() if capability in getattr(cls, "capabilities", ())]

    def selected(self, cfg: Any) -> C | None:
        """The component a run's configuration names through this kind's option (None when no option does)."""
        if self.option is None:
            return None
        value = getattr(cfg, self.option, None)
        return None if value is None or value not in self else self.get(value)


class _Choices(list):
    """A registry's names as an option's choices (``npz:PATH`` shown for one taking an argument), whose `in`
    asks the registry (``"npz:/x.npz" in choices``)."""

    def __init__(self, registry: Registry[Any]) -> None:
        super().__init__(f"{n}:{registry._arguments[n]}" if n in registry._arguments else n for n in registry.names())
        self.registry = registry

    def __contains__(self, value: object) -> bool:
        return value in self.registry


#: The modules that make the kinds' registries (a new kind adds its module here; a new component edits nothing).
KIND_MODULES = (
    "p2pfl.gossip.schemes",  # SCHEMES: the decentralised optimisers, --gossip
    "p2pfl.gossip.compress",  # CODECS: --compress
    "p2pfl.gossip.rules",  # RULES: how a peer combines what it received
    "p2pfl.byzantine.aggregators",  # AGGREGATORS: --aggregator
    "p2pfl.byzantine.attacks",  # ATTACKS: --attack
    "p2pfl.network.clock",  # NETWORK_MODELS: the simulated clock's network
    "p2pfl.data.datasets",  # DATASETS: --dataset
    "p2pfl.data.partitions",  # PARTITIONS: --partition
    "p2pfl.models.encoders",  # MODELS: --model
    "p2pfl.modes",  # MODES: --mode, how a run proceeds in time
    "p2pfl.curious",  # CURIOUS: --curious-attack, what curious neighbours attack
)


def options_of(cls: type, cfg: Any) -> Any:
    """The `Options` of component `cls` as the run's configuration `cfg` holds them (their defaults when `cfg` is
    None); None for a component that declares none. A component whose base declares a section of options too (hf:
    over the own-files datasets' --test-split) gets one object holding its own section's options and its bases'."""
    merged = options_class(cls)
    if merged is None or cfg is None:
        return None if merged is None else merged()
    return merged(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(merged)})


def options_class(cls: type) -> type | None:
    """The class of `options_of(cls, ...)`: its `Options`, with its bases' sections when they declare some too."""
    if getattr(cls, "Options", None) is None:
        return None
    return _merged_options(tuple(dict.fromkeys(c.__dict__["Options"] for c in cls.__mro__
                                               if c.__dict__.get("Options") is not None)))


@functools.cache
def _merged_options(sections: tuple[type, ...]) -> type:
    """The sections as one frozen dataclass (the first when alone; else a class deriving from all of them, which is
    no section of its own: each keeps its fields, flags and --help group)."""
    if len(sections) == 1:
        return sections[0]
    name = "+".join(s.__name__ for s in sections)
    return dataclasses.make_dataclass(name, [], bases=sections, frozen=True)


def load_all() -> None:
    """Import every kind's module and the built-ins of every kind (their option sections registered)."""
    for module in KIND_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:  # transitional while the kinds move into registries
            if exc.name != module:
                raise
    for registry in list(KINDS.values()):
        registry.load()


def check_selected(cfg: Any, check: Check) -> None:
    """Run the `check` of every component the configuration selects, kind by kind in the order they were made."""
    for registry in list(KINDS.values()):
        component = registry.selected(cfg)
        rules = getattr(component, "check", None)
        if rules is not None:
            rules(cfg, check)


def check_resolved(cfg: Any, check: Check) -> None:
    """Run the `check_resolved` of every component the resolved configuration selects, like `check_selected`."""
    for registry in list(KINDS.values()):
        rules = getattr(registry.selected(cfg), "check_resolved", None)
        if rules is not None:
            rules(cfg, check)
