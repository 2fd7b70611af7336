"""How an option is declared, and the registry of the options the methods declare next to them.

An option is a dataclass field made by `opt`: its default, its help line, where its closed set of values lives
(`choices`: a sequence, or a function returning one, e.g. `owned(module, name)`), the range a number must lie in
(`bounds`: "(0, 1]", ">= 0", written as the error message says it; p2pfl.config checks every option's), its
`--help` group (`section`) and where its default comes from (`paper`; None: the project's own choice).

A method's own options are one frozen dataclass in the method's file, registered with
`@method_options("<method>")`; its ranges are declared (`bounds`), its other rules (a file that must exist, a
bound that depends on another option) go in `validate(self, check)`, calling `check(ok, option, message)` for
each; they run after the core's rules on training, or on the run or the data with `validated_after = "run"` /
`"data"` (a ClassVar; it decides only which of several bad values a run names first). Its paper's values for
options left unset (its own or the core's) stay the method's `defaults`, its restrictions `allowed`
(p2pfl.method.Algorithm).

p2pfl.config assembles the command line, the YAML keys and RunConfig from the core options it declares and
the sections registered here; it imports no method. The methods are found through one catalogue, the module
named by `CATALOGUE` (`names()`, `get(name, cfg)`, `batchable()`), imported the first time the
options are needed: importing it and every method it lists registers every section.
"""
from __future__ import annotations

import dataclasses
import importlib
import operator
import re
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import Any

#: The module that lists the methods (the algorithm registry).
CATALOGUE = "p2pfl.algorithms"

#: A rule of `validate`: check(ok, option, message) raises the one-line ConfigError "--option: message".
Check = Callable[[bool, str, str], None]


def opt(default: Any, help: str, choices: Sequence[str] | Callable[[], Sequence[str]] | None = None,
        section: str = "run", paper: str | None = None, bounds: str | Callable[[], str] | None = None) -> Any:
    """A dataclass field that is an option (a flag, a YAML key and a RunConfig attribute). `bounds` (or a function
    returning it, read when first needed) is the range a number must lie in, as `Bounds` reads it; None passes."""
    if isinstance(bounds, str):
        Bounds.parse(bounds)  # a malformed range fails where it is declared
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices, "section": section,
                                                        "paper": paper, "bounds": bounds})


_INTERVAL = re.compile(r"([\[(])\s*(\S+?)\s*,\s*(\S+?)\s*([\])])(.*)")
_SIDE = re.compile(r"(>=|>|<=|<)\s*(\S+)(.*)")
_COMPARE = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


def _number(text: str) -> int | float:
    return int(text) if re.fullmatch(r"[+-]?\d+", text) else float(text)


@dataclasses.dataclass(frozen=True)
class Bounds:
    """The range of a numeric option, written as its message says it: an interval "(0, 1]", "[0, 1)" or one side
    ">= 0", "> 0", optionally followed by words the message keeps ("> 0 seconds", ">= 0 (0: never summarise)")."""

    text: str
    rules: tuple[tuple[str, int | float], ...]  # (comparison, bound): the value must satisfy each
    interval: bool

    @classmethod
    def parse(cls, text: str) -> Bounds:
        try:
            interval = _INTERVAL.fullmatch(text.strip())
            if interval is not None:
                left, low, high, right, _ = interval.groups()
                rules = ((">" if left == "(" else ">=", _number(low)), ("<" if right == ")" else "<=", _number(high)))
                return cls(text.strip(), rules, True)
            side = _SIDE.fullmatch(text.strip())
            if side is not None:
                return cls(text.strip(), ((side.group(1), _number(side.group(2))),), False)
        except ValueError:  # a bound that is no number
            pass
        raise ValueError(f"bounds {text!r}: expected an interval such as '(0, 1]' or a side such as '>= 0'")

    def admits(self, value: int | float) -> bool:
        """Whether `value` lies in the range (NaN never does)."""
        return all(_COMPARE[op](value, bound) for op, bound in self.rules)

    def message(self, shown_value: str) -> str:
        """The one-line refusal of a value (shown as the message quotes it): "must lie in (0, 1], got 1.5"."""
        return f"must {'lie in' if self.interval else 'be'} {self.text}, got {shown_value}"

    @property
    def range(self) -> str:
        """The range without the words after it ("(0, 1]", ">= 0"), as --help shows it."""
        match = (_INTERVAL if self.interval else _SIDE).fullmatch(self.text)
        assert match is not None
        return self.text[:len(self.text) - len(match.groups()[-1])].rstrip()


def bounds(f: dataclasses.Field) -> Bounds | None:
    """The declared range of an option's field (None: any value of its type)."""
    declared = f.metadata.get("bounds")
    if declared is None:
        return None
    return Bounds.parse(declared() if callable(declared) else declared)


def owned(module: str, name: str) -> Callable[[], list[str]]:
    """The allowed values `module.name` holds (a registry, a tuple, or a function returning names), read when
    first needed so that importing the configuration stays light."""
    def allowed() -> list[str]:
        values = getattr(importlib.import_module(module), name)
        return list(values() if callable(values) else values)
    return allowed


#: The stretches of the core's rules a section's rules may follow (p2pfl.config.validate).
STRETCHES = ("run", "data", "training")

_SECTIONS: dict[str, type] = {}
#: The core options' names (RunConfig's fields, p2pfl.config reserves them): no section may declare one again.
_RESERVED: set[str] = set()


def reserve(names: Iterable[str]) -> None:
    """Keep `names` (the core options) out of every section, so a plug-in cannot declare --rounds again."""
    _RESERVED.update(names)


def method_options(name: str) -> Callable[[type], type]:
    """Make the decorated class a frozen dataclass of options and register it as the section `name` (the
    method's name); its fields are options of every run, shown in `--help` and config.yaml."""
    def register(cls: type) -> type:
        cls = dataclasses.dataclass(frozen=True)(cls)
        if not hasattr(cls, "validated_after"):
            cls.validated_after = "training"
        if cls.validated_after not in STRETCHES:
            raise ValueError(f"section {name!r}: validated_after must be one of {STRETCHES}")
        declared = {f.name for f in dataclasses.fields(cls)}
        core = declared & _RESERVED
        if core:
            raise ValueError(f"options {sorted(core)} of section {name!r} are p2pfl's own (core options): "
                             "name them otherwise")
        for other, section in _SECTIONS.items():
            same = (section.__module__, section.__qualname__) == (cls.__module__, cls.__qualname__)
            clash = declared & {f.name for f in dataclasses.fields(section)}
            if other == name and not same:
                raise ValueError(f"two option sections are named {name!r}")
            if other != name and clash:
                raise ValueError(f"options {sorted(clash)} of section {name!r} are already section {other!r}'s")
        _SECTIONS[name] = cls
        return cls
    return register


_catalogue: ModuleType | None = None
_loading = False


def catalogue() -> ModuleType:
    """The method catalogue, with every method's module imported (so every section registered)."""
    global _catalogue, _loading
    if _catalogue is None:
        module = importlib.import_module(CATALOGUE)
        if _loading:  # a method module asking while the catalogue is being read: what is registered so far
            return module
        _loading = True
        try:
            for name in module.names():
                module.get(name)
        finally:
            _loading = False
        _catalogue = module
    return _catalogue


def sections() -> dict[str, type]:
    """Every options section registered so far by name, the methods' catalogue read first (the components'
    sections register as their registries load: p2pfl.registry.load_all, which p2pfl.config calls)."""
    catalogue()
    return dict(_SECTIONS)
