"""`python -m p2pfl.run --help`: one short page, one line per core option, grouped (the components' own options a
line per kind), every closed option with its choices and every core option's default as the method the command
line names (else the default one) would use it; and `--help TOPIC` in full: a kind of component (`--help gossip`:
every scheme, its options, capabilities and paper), a method (`--help moon`: its options, the defaults it sets,
what it allows), a group of options or one option.

Everything shown is read from the declarations (p2pfl.options, p2pfl.registry, the methods' `defaults`), so a
plug-in's components and options appear as the built-ins do.
"""
from __future__ import annotations

import dataclasses
import textwrap
from typing import Any

from p2pfl import config
from p2pfl.options import bounds, catalogue
from p2pfl.options import sections as registered
from p2pfl.registry import options_class
from p2pfl.shown import shown

#: Width of the wrapped text of `--help TOPIC` (the short page is one line per option, never wrapped).
WIDTH = 110
#: The most characters of an option's help the short page shows (the rest: `--help OPTION`).
SUMMARY = 72
#: The topic that lists every option in full.
ALL = "all"


def _flag(f: dataclasses.Field) -> str:
    name = config._flag(f.name)
    return f"--[no-]{name[2:]}" if config._field_type(f) is bool else name


def _metavar(f: dataclasses.Field) -> str:
    """What the flag takes: its choices, else its type and range."""
    typ = config._field_type(f)
    if typ is bool:
        return ""
    choices = f.metadata["choices"]
    if choices is not None:
        return "{" + ",".join(map(str, choices() if callable(choices) else choices)) + "}"
    if typ is tuple:
        return "PATH.py|MODULE ..."
    declared = bounds(f)
    kind = {int: "INT", float: "FLOAT"}.get(typ, "TEXT")
    if declared is None:
        return kind
    return f"{kind} {'in ' if declared.interval else ''}{declared.range}"


def _summary(text: str, width: int = SUMMARY) -> str:
    """The help text, cut at the last clause that fits in `width` characters."""
    if len(text) <= width:
        return text
    head = text[:width]
    cut = max(head.rfind(mark) for mark in ("; ", ": ", " (", ", "))
    if cut < width // 3:
        cut = head.rfind(" ")
    return head[:cut].rstrip(" ,;:") + " ..."


def method_defaults(algorithm: str) -> dict[str, Any]:
    """The options `algorithm` sets to its own values when left unset (its paper's; Algorithm.defaults)."""
    return config._declared(config._assemble({"algorithm": algorithm}), "defaults")


def _default(f: dataclasses.Field, own: dict[str, Any]) -> str:
    """The default as written on the command line; '*' when the method sets it."""
    if f.name == "algorithm":
        return ""
    value = own.get(f.name, f.default)
    if value is None or value == ():
        return ""
    return f" [{config._as_written(value)}{'*' if f.name in own else ''}]"


def _groups() -> dict[str, list[dataclasses.Field]]:
    """The options by group, in the order of config.options(): a component's under its kind, the others under
    their declared section."""
    component = {f.name: name.partition(": ")[0] for name, cls in registered().items() if ": " in name
                 for f in dataclasses.fields(cls)}
    out: dict[str, list[dataclasses.Field]] = {}
    for f in config.options():
        out.setdefault(component.get(f.name, f.metadata["section"]), []).append(f)
    return out


def _word(registry: Any) -> str:
    """The word `--help` takes for a kind: its option's flag, else its name, dashed."""
    return (registry.option or registry.kind).replace("_", "-").replace(" ", "-")


def page(algorithm: str) -> str:
    """The short --help: usage, the topics, then one line per option."""
    own = method_defaults(algorithm)
    from p2pfl.registry import KINDS
    kinds = {r.kind: _word(r) for r in KINDS.values()}
    lines = [
        "usage: python -m p2pfl.run [-h [TOPIC]] [--config FILE] [--print-config] [--quiet | --verbose] "
        "[--OPTION VALUE ...]  (under mpirun, or alone)",
        "Peers that learn together over a graph. --config FILE: a YAML file of options (flags given here override "
        "it); --print-config: print the resolved configuration and exit; --quiet: warnings and errors only (no "
        "banner, progress or summary); --verbose: debug messages too (the console, not the run: docs/logging.md).",
        f"Defaults as --algorithm {algorithm} runs (*: its own values; --algorithm X --help shows X's). --help TOPIC "
        f"in full: {ALL}, a kind ({', '.join(kinds.values())}), a method, a group or an option.",
    ]
    groups = _groups()
    others = _other_methods_groups(algorithm, groups)
    for group, group_fields in groups.items():
        if group in kinds or group in others:
            continue
        lines += ["", f"{group}:"]
        for f in group_fields:
            left = f"  {_flag(f)} {_metavar(f)}".rstrip()
            lines.append(f"{left:<32}  {_summary(f.metadata['help'])}{_default(f, own)}".rstrip())
    if others:  # a line a method whose own options this method does not read
        lines += ["", f"other methods' own options (--algorithm {algorithm} does not read them; --help METHOD):"]
        lines += [f"  {group}: " + ", ".join(_named(f) for f in groups[group]) for group in others]
    own_options = [(group, fs) for group, fs in groups.items() if group in kinds]
    if own_options:  # a line a kind, however many components (plug-ins too) add options
        lines += ["", "the components' own options (--help KIND: each with its meaning, range and default):"]
        lines += [f"  {kinds[group]}: " + ", ".join(_named(f) for f in fs) for group, fs in own_options]
    return "\n".join(lines) + "\n"


def _other_methods_groups(algorithm: str, groups: dict[str, list[dataclasses.Field]]) -> list[str]:
    """The groups that are other methods' own sections, none of whose options `algorithm` reads (p2pfl.ignored)."""
    from p2pfl.ignored import unread_method_option
    from p2pfl.options import catalogue

    method = catalogue().get(algorithm)
    return [group for group, fs in groups.items()
            if all(unread_method_option(method, f.name) is not None for f in fs)]


def _named(f: dataclasses.Field) -> str:
    """A component's option on its kind's line: the flag, with its choices when it has a closed set."""
    return f"{_flag(f)} {_metavar(f)}" if f.metadata["choices"] is not None else _flag(f)


def _full(f: dataclasses.Field, own: dict[str, Any], indent: str = "  ") -> list[str]:
    """One option in full: its flag and what it takes, then its help, default, range and paper, wrapped."""
    text = f.metadata["help"]
    default = _default(f, own).strip(" []")
    if default:
        text += f" (default: {default.rstrip('*')}" + (", the method's own)" if default.endswith("*") else ")")
    if f.metadata.get("paper"):
        text += f"; paper: {f.metadata['paper']}"
    wrapped = textwrap.wrap(text, WIDTH - len(indent) - 4)
    return [f"{indent}{_flag(f)} {_metavar(f)}".rstrip(), *(f"{indent}    {line}" for line in wrapped)]


def _described(head: str, cls: type, indent: str) -> list[str]:
    """`head` and the first paragraph of the class's docstring, wrapped."""
    doc = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
    return textwrap.wrap(f"{head}: {doc}" if doc else head, WIDTH, subsequent_indent=indent)


def _component(cls: type, own: dict[str, Any]) -> list[str]:
    """A registered component: its name and what its docstring says first, capabilities, paper and options."""
    lines = _described(f"  {cls.name}", cls, "      ")
    if getattr(cls, "capabilities", None):
        lines.append(f"      capabilities: {', '.join(sorted(cls.capabilities))}")
    if getattr(cls, "paper", None):
        lines.append(f"      paper: {cls.paper}")
    options = options_class(cls)  # its own and its bases' (hf: shows --test-split too)
    for f in dataclasses.fields(options) if options is not None else ():
        lines += _full(f, own, indent="      ")
    return lines


def _kind(registry: Any, own: dict[str, Any]) -> str:
    """`--help KIND`: the kind's option, then every registered component."""
    names = registry.names()
    where = f" (--{registry.option.replace('_', '-')})" if registry.option else ""
    lines = [f"{registry.kind}{where}: {len(names)} registered"]
    if registry.option:
        option = next((f for f in config.options() if f.name == registry.option), None)
        if option is not None:
            lines += _full(option, own)
    lines.append("")
    for name in names:
        lines += _component(registry.get(name), own)
    return "\n".join(lines) + "\n"


def _method(name: str, own: dict[str, Any]) -> str:
    """`--help METHOD`: what it is, can and cannot do, the defaults it sets, what it allows, its own options."""
    cls = catalogue().get(name)
    lines = _described(f"--algorithm {name}", cls, "  ")
    said = []
    capabilities = sorted(getattr(cls, "capabilities", ()))
    if capabilities:
        said.append(f"capabilities: {', '.join(capabilities)}")
    lacks = getattr(cls, "lacks", None)
    if isinstance(lacks, dict) and lacks:
        said.append("lacks: " + "; ".join(f"{word} ({why})" for word, why in lacks.items()))
    if own:
        core = {f.name: f.default for f in config.options()}
        said.append(f"sets, when left unset ({name}'s own value; core: the project-wide default): " + ", ".join(
            f"{config._flag(k)} {config._as_written(v)} ({name}'s; core: {config._as_written(core.get(k))})"
            for k, v in own.items()))
    allowed = dict(getattr(cls, "allowed", {}))
    if allowed:
        said.append("allows only: " + ", ".join(f"{config._flag(k)} {'|'.join(map(config._as_written, vs))}"
                                                for k, vs in allowed.items()))
    for text in said:
        lines += textwrap.wrap(text, WIDTH, initial_indent="  ", subsequent_indent="      ")
    section = registered().get(name)
    if section is not None:
        lines.append("  its options:")
        for f in dataclasses.fields(section):
            lines += _full(f, own, indent="    ")
    return "\n".join(lines) + "\n"


def topics() -> list[str]:
    """Every word --help takes: all, the kinds, the methods, the groups, the options."""
    from p2pfl.registry import KINDS
    words = [ALL]
    words += [_word(registry) for registry in KINDS.values()]
    words += list(catalogue().names()) + list(_groups())
    words += [f.name.replace("_", "-") for f in config.options()]
    return list(dict.fromkeys(words))


def topic(word: str, algorithm: str) -> str:
    """`--help WORD` in full; ConfigError naming --help for a word that is no topic."""
    from p2pfl.registry import KINDS
    own = method_defaults(algorithm)
    key = word.strip().lower()
    if key == ALL:
        return "".join(f"\n{group}:\n" + "\n".join(line for f in fs for line in _full(f, own)) + "\n"
                       for group, fs in _groups().items()).lstrip("\n")
    for registry in KINDS.values():
        if key.replace(" ", "-").replace("_", "-") in (_word(registry), registry.kind.replace(" ", "-")):
            return _kind(registry, own)
    if key in catalogue().names():
        return _method(key, method_defaults(key))
    groups = _groups()
    if key in groups:
        return f"{key}:\n" + "\n".join(line for f in groups[key] for line in _full(f, own)) + "\n"
    name = key.lstrip("-").replace("-", "_")
    for f in config.options():
        if f.name == name or config._flag(f.name) == "--" + key.lstrip("-"):
            return "\n".join(_full(f, own, indent="")) + "\n"
    named = [w for w in topics() if w not in {f.name.replace("_", "-") for f in config.options()}]
    raise config.ConfigError(f"--help: unknown topic {shown(word)}; allowed: {', '.join(named)}, or an option's name")


def render(word: str | None, given: dict[str, Any]) -> str:
    """What `--help [WORD]` prints, given the other options on the command line (their --algorithm)."""
    algorithm = given.get("algorithm")
    if algorithm is None and given.get("config") is not None:
        algorithm = config.load_yaml(given["config"]).get("algorithm")
    algorithm = str(algorithm) if algorithm is not None else config.RunConfig.algorithm
    methods = catalogue().names()
    if algorithm not in methods:
        raise config.ConfigError(f"--algorithm: unknown value {shown(algorithm)}; allowed: {', '.join(methods)}")
    return page(algorithm) if word is None else topic(word, algorithm)
