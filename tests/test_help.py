"""`--help`: one short page (one line an option, every closed option with its choices, defaults as the named method
runs them), `--help TOPIC` in full; and the options' declared ranges, which reject exactly the values outside."""
from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from p2pfl.cli import parse_args
from p2pfl.config import ConfigError, _flag, make_config, options
from p2pfl.options import Bounds, bounds

from conftest import run_job

#: The options whose values form a closed set, named here independently of their declarations.
CLOSED = ("algorithm", "topology", "mixing", "device", "dtype", "gossip", "compress", "mode", "on_nonfinite", "rejoin",
          "attack", "aggregator", "dataset", "partition", "optimizer", "schedule", "batch_peers", "fedbn",
          "sl_augment", "loss", "vector_dtype")
#: The schemes --gossip has always offered (a plug-in may add more: they are listed too).
SCHEMES = ("average", "gradient-tracking", "d2", "exact-diffusion", "qgm", "push-sum", "relay", "choco")
#: The short page's length (it was 390 lines before the options declared their ranges and choices).
MOST_LINES = 150


def helped(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as stop:
        parse_args(argv)
    assert stop.value.code == 0
    return capsys.readouterr().out


def line_of(page: str, option: str) -> str:
    flag = _flag(option)
    found = [line for line in page.splitlines() if line.split()[:1] in ([flag], [f"--[no-]{flag[2:]}"])]
    assert len(found) == 1, (option, found)
    return found[0]


def components_options() -> dict[str, str]:
    """Each registered component's own option, with the word `--help` takes for its kind."""
    from p2pfl.registry import KINDS, load_all

    load_all()
    return {f.name: (registry.option or registry.kind).replace("_", "-").replace(" ", "-")
            for registry in KINDS.values() for name in registry.names()
            if getattr(registry.get(name), "Options", None) is not None
            for f in dataclasses.fields(registry.get(name).Options)}


def owners() -> dict[str, list[str]]:
    """The values each closed option allows, read from where they live: the method catalogue, the topologies, the
    registries of components (p2pfl.registry) and the tuples the core declares."""
    import topologies
    from p2pfl import algorithms
    from p2pfl.registry import KINDS, load_all

    load_all()
    out = {f.name: list(f.metadata["choices"]() if callable(f.metadata["choices"]) else f.metadata["choices"])
           for f in options() if f.metadata["choices"] is not None}
    out["algorithm"] = list(algorithms.names())
    out["topology"] = [*topologies.names(), *topologies.dynamic_names()]
    out.update({r.option: list(r.names()) for r in KINDS.values() if r.option is not None})
    return out


def test_the_page_is_short_and_names_every_closed_options_choices(capsys) -> None:
    page = helped(["--help"], capsys)
    assert len(page.splitlines()) < MOST_LINES
    own = {**components_options(), **other_methods_options("dec-ssl")}
    for option, allowed in owners().items():
        line = own_line(page, option, own[option]) if option in own else line_of(page, option)
        assert all(name in line for name in allowed), (option, allowed, line)
    for option in CLOSED:
        assert "{" in (own_line(page, option, own[option]) if option in own else line_of(page, option)), option
    for f in options():  # one line a core option; a component's (another method's) own options on one line of its
        # kind (its method's group)
        if f.name in own:
            own_line(page, f.name, own[f.name])
        else:
            line_of(page, f.name)


def other_methods_options(algorithm: str) -> dict[str, str]:
    """The options of other methods' groups that `algorithm` reads none of (on one line a group), with the group,
    computed here from p2pfl.ignored: each option is unread by `algorithm` as another method's own."""
    from p2pfl import cli_help
    from p2pfl.ignored import unread_method_option
    from p2pfl.options import catalogue

    method = catalogue().get(algorithm)
    return {f.name: group for group, fs in cli_help._groups().items()
            if all(unread_method_option(method, f.name) is not None for f in fs) for f in fs}


def own_line(page: str, option: str, kind: str) -> str:
    """A component's option on its kind's line of the short page: the flag and, for a closed one, its choices."""
    found = [line for line in page.splitlines() if line.startswith(f"  {kind}: ")]
    assert len(found) == 1, (kind, found)
    entries = found[0].split(": ", 1)[1].split(", ")
    flag = _flag(option)
    entry = [e for e in entries if e.split()[0] in (flag, f"--[no-]{flag[2:]}")]  # a boolean's both forms
    assert len(entry) == 1, (option, found[0])
    return entry[0]


def test_the_page_shows_the_defaults_the_named_method_runs_with(capsys) -> None:
    page = helped(["--help"], capsys)  # the default method: dec-ssl's budget and temperature
    assert line_of(page, "batch_size").endswith("[32*]") and line_of(page, "temperature").endswith("[0.2*]")
    assert line_of(page, "optimizer").endswith("[adam]")
    assert own_line(page, "mu", "moon") == "--mu"  # moon's own option, which dec-ssl does not read: on moon's line
    moon = helped(["--help", "--algorithm", "moon"], capsys)  # wherever --help stands
    assert moon == helped(["--algorithm", "moon", "--help"], capsys)
    expected = {"mu": "5.0", "optimizer": "sgd", "lr": "0.01", "batch_size": "64", "weight_decay": "1e-05",
                "temperature": "0.5"}
    for option, value in expected.items():
        assert line_of(moon, option).endswith(f"[{value}*]"), line_of(moon, option)
    assert line_of(moon, "rounds").endswith("[10]")


def test_help_gossip_lists_every_registered_scheme(capsys) -> None:
    from p2pfl.registry import KINDS, load_all

    load_all()
    registered = next((list(r.names()) for r in KINDS.values() if r.option == "gossip"), [])
    text = helped(["--help", "gossip"], capsys)
    for name in {*SCHEMES, *registered}:
        assert name in text, name


def test_help_topics_in_full(capsys) -> None:
    moon = helped(["--help", "moon"], capsys)
    assert "--mu FLOAT >= 0" in moon and "--prev-models INT >= 1" in moon and "--optimizer sgd" in moon
    network = helped(["--help", "network"], capsys)
    assert "--link-failure FLOAT in [0, 1)" in network and "--rounds" not in network
    assert helped(["--help", "rounds"], capsys).startswith("--rounds INT >= 0\n")
    everything = helped(["--help", "all"], capsys)
    assert all(f"{_flag(f.name)} " in everything or f"--[no-]{_flag(f.name)[2:]}\n" in everything for f in options())
    with pytest.raises(ConfigError, match=r"^--help: unknown topic 'nope'; allowed: all, .*or an option's name$"):
        parse_args(["--help", "nope"])


def test_a_plugins_options_and_components_are_in_the_help(tmp_path) -> None:
    """A plug-in's section appears in --help as the built-ins' do, its range enforced like theirs."""
    plugin = tmp_path / "knob.py"
    plugin.write_text("from p2pfl.options import method_options, opt\n\n\n"
                      "@method_options('knob')\nclass KnobOptions:\n"
                      "    knob: float = opt(0.5, 'a knob of mine', section='knob', bounds='(0, 1]')\n")
    page = run_job(["-m", "p2pfl.run", "--plugin", str(plugin), "--help"], ranks=0)
    assert page.returncode == 0, page.stderr
    assert " ".join(line_of(page.stdout, "knob").split()) == "--knob FLOAT in (0, 1] a knob of mine [0.5]"
    refused = run_job(["-m", "p2pfl.run", "--plugin", str(plugin), "--knob", "0", "--print-config"], ranks=0)
    assert refused.returncode == 2 and refused.stderr.strip() == "p2pfl: error: --knob: must lie in (0, 1], got 0.0"


# ---------------------------------------------------------------------------------------------- declared ranges

def test_every_default_lies_in_its_declared_range() -> None:
    for f in options():
        declared = bounds(f)
        if declared is not None and f.default is not None:
            assert declared.admits(f.default), (f.name, f.default, declared.text)


finite = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6)


@settings(max_examples=300, deadline=None)
@given(low=finite, high=finite, left=st.sampled_from("[("), right=st.sampled_from("])"), value=finite)
def test_an_interval_admits_exactly_its_values(low: float, high: float, left: str, right: str, value: float) -> None:
    interval = Bounds.parse(f"{left}{low!r}, {high!r}{right}")
    above = value > low if left == "(" else value >= low
    below = value < high if right == ")" else value <= high
    assert interval.admits(value) == (above and below)
    assert interval.admits(low) == (left == "[" and low <= high and (right == "]" or low < high))
    assert interval.admits(high) == (right == "]" and low <= high and (left == "[" or low < high))
    assert not interval.admits(math.nan)


@settings(max_examples=200, deadline=None)
@given(side=st.sampled_from([">=", ">", "<=", "<"]), bound=st.integers(-1000, 1000), value=st.integers(-2000, 2000))
def test_a_side_admits_exactly_its_values(side: str, bound: int, value: int) -> None:
    declared = Bounds.parse(f"{side} {bound}")
    assert declared.admits(value) == {">=": value >= bound, ">": value > bound, "<=": value <= bound,
                                      "<": value < bound}[side]
    assert declared.admits(bound) == (side in (">=", "<="))
    assert declared.admits(bound + 1) == (side in (">=", ">")) and declared.admits(bound - 1) == (side in ("<=", "<"))


@settings(max_examples=60, deadline=None)
@given(p=st.floats(min_value=-0.5, max_value=1.5, allow_nan=False))
@example(p=0.0)
@example(p=1.0)
@example(p=math.nextafter(1.0, 2.0))
@example(p=5e-324)
def test_a_declared_range_refuses_exactly_the_values_outside(p: float) -> None:
    """--p is declared (0, 1]: a run takes every value inside it and refuses every other with today's message."""
    try:
        assert make_config(p=p).p == p and 0 < p <= 1
    except ConfigError as exc:
        assert not 0 < p <= 1 and str(exc) == f"--p: must lie in (0, 1], got {p!r}"


@pytest.mark.parametrize("option,inside,outside,message", [
    ("rounds", 0, -1, "--rounds: must be >= 0, got -1"),
    ("link_failure", 0.0, 1.0, "--link-failure: must lie in [0, 1), got 1.0"),
    ("timeout", 1e-9, 0.0, "--timeout: must be > 0 seconds, got 0.0"),
    ("peer_records", 0, -1, "--peer-records: must be >= 0 (0: never summarise), got -1"),
    ("batch_size", 2, 1, "--batch-size: must be >= 2, got 1"),
    ("threads", 1024, 1025, "--threads: must lie in [1, 1024] (threads per process; a node has fewer cores), got "
                            "1025"),
    ("mask_ratio", 0.5, 0.0, "--mask-ratio: must lie in (0, 1), got 0.0"),  # a method's section
    ("prev_models", 1, 0, "--prev-models: must be >= 1, got 0"),
])
def test_the_boundaries_of_declared_ranges(option: str, inside: float, outside: float, message: str) -> None:
    assert getattr(make_config(**{option: inside}), option) == inside
    with pytest.raises(ConfigError) as err:
        make_config(**{option: outside})
    assert str(err.value) == message


def test_a_malformed_range_fails_where_it_is_declared() -> None:
    from p2pfl.options import opt

    for text in ("0..1", "(0, 1", ">= one", "between 0 and 1"):
        with pytest.raises(ValueError, match="bounds"):
            opt(0.5, "a fraction", bounds=text)
    field = opt(0.5, "a fraction", bounds="(0, 1] of the data")
    assert isinstance(field, dataclasses.Field) and Bounds.parse("(0, 1] of the data").range == "(0, 1]"
