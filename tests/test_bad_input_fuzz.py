"""Bad input at scale (property-based, hypothesis): whatever value any option is given, on the command line or in
a YAML file, the run either is accepted or ends before training with one line naming an option and exit 2 on
every rank; never a traceback, never another exception."""
from __future__ import annotations

import math
import re

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from p2pfl.cli import parse_args
from p2pfl.config import ConfigError, _flag, options, resolve
from p2pfl.run import build_network, main

from conftest import run_job

OPTIONS = [f.name for f in options()]
FLAGS = {_flag(name) for name in OPTIONS} | {"--config"}
#: An option whose value is fine on its own may be refused by the option it needs: these pairs are expected.
NEEDS = {"topology": {"--graph-file", "--p", "--resample", "--mixing", "--crash", "--peers"},
         "mixing": {"--topology"}, "peers": {"--crash", "--byzantine", "--topology"},
         "resample": {"--topology"}, "algorithm": {"--optimizer", "--peers-spec", "--model", "--dataset"},
         "seed": {"--crash", "--byzantine"}, "rounds": {"--crash"},
         "curious": {"--curious-attack"}}  # the attack (reconstruction by default) must fit the method
#: Runs this large are valid but too big to build a network for inside a property test.
BUILD_AT_MOST = 64

numbers = st.one_of(st.integers(min_value=-10 ** 30, max_value=10 ** 30),
                    st.floats(allow_nan=True, allow_infinity=True))
flag_values = st.one_of(
    st.text(max_size=12).filter(lambda s: "\x00" not in s and not s.startswith("-")),  # argv cannot carry NUL
    numbers.map(str),
    st.sampled_from(["nan", "inf", "-inf", "1e400", "-0", "0x10", "1_000", "", " ", "none", "true", "3@2",
                     "150%@2", "nan@1:2", "0,1,1", "../x", "cycle", "complete"]))
yaml_scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=12))
yaml_values = st.recursive(yaml_scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                                st.dictionaries(st.text(max_size=5), inner,
                                                                                max_size=3)), max_leaves=6)


def before_training(argv: list[str]) -> None:
    """Everything a run checks before training, on one rank: options, resolution, the network."""
    cfg, _ = parse_args(argv)
    run = resolve(cfg, 1)
    if run.cfg.peers <= BUILD_AT_MOST and run.cfg.rounds <= 1000:
        build_network(run.cfg)


def assert_one_line_naming(message: str, fuzzed: list[str]) -> None:
    assert "\n" not in message and message, message
    named = re.match(r"(--[a-z0-9-]+)", message)
    assert named is not None and named.group(1) in FLAGS, f"names no option: {message!r}"
    expected = {_flag(o) for o in fuzzed} | {n for o in fuzzed for n in NEEDS.get(o, ())}
    assert named.group(1) in expected, f"{fuzzed}: {message!r}"


def check(argv: list[str], fuzzed: list[str]) -> None:
    try:
        before_training(argv)
    except ConfigError as exc:
        assert_one_line_naming(str(exc), fuzzed)
    except ValueError as exc:  # what agree() turns into the one line: it must name the option as well
        assert_one_line_naming(str(exc).splitlines()[0], fuzzed)


BASE = ["--peers", "6", "--rounds", "3"]


def flag_argv(option: str, value: str) -> list[str]:
    f = next(f for f in options() if f.name == option)
    return [_flag(option)] if f.type in ("bool", bool) else [_flag(option), value]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(option=st.sampled_from(OPTIONS), value=flag_values)
@example(option="rounds", value="1e400")
@example(option="lr", value="nan")
@example(option="timeout", value="inf")
@example(option="name", value="../x")
@example(option="seed", value="-1")
def test_any_flag_value_is_accepted_or_one_line_naming_the_option(option: str, value: str) -> None:
    check([*BASE, *flag_argv(option, value)], [option])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pairs=st.lists(st.tuples(st.sampled_from(OPTIONS), flag_values), min_size=2, max_size=4))
def test_several_bad_flags_name_one_of_them(pairs: list[tuple[str, str]]) -> None:
    check([*BASE, *(a for option, value in pairs for a in flag_argv(option, value))], [o for o, _ in pairs])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(option=st.sampled_from(OPTIONS), value=yaml_values)
@example(option="rounds", value=[1, 2])
@example(option="name", value={"a": 1})
@example(option="p", value=math.inf)
def test_any_yaml_value_is_accepted_or_one_line_naming_the_option(tmp_path_factory, option: str, value) -> None:
    path = tmp_path_factory.mktemp("yaml") / "c.yaml"
    path.write_text(yaml.safe_dump({"peers": 6, "rounds": 3, option: value}))
    check(["--config", str(path)], [option])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(content=st.one_of(st.text(max_size=40).map(str.encode), st.binary(max_size=40),
                         st.dictionaries(yaml_scalars, yaml_values, max_size=4).map(
                             lambda d: yaml.safe_dump(d).encode())))
@example(content=b"rounds: 3\n  bad indent: [")
@example(content=b"- a\n- b\n")
@example(content=b"\x80")
def test_any_yaml_file_is_accepted_or_one_line_naming_config(tmp_path_factory, content: bytes) -> None:
    """Any bytes, text or mapping (keys of any type, values of any shape) as the --config file."""
    path = tmp_path_factory.mktemp("yaml") / "c.yaml"
    path.write_bytes(content)
    try:
        before_training(["--config", str(path), *BASE])
    except ValueError as exc:
        message = str(exc)
        assert "\n" not in message
        named = re.match(r"(--[a-z0-9-]+)", message)
        assert named is not None and named.group(1) in FLAGS, message


INVALID = [(["--lr", "nan"], "--lr: must be a finite number"), (["--rounds", "1e400"], "--rounds: expected int"),
           (["--topology", "cycle", "--crash", "0@1,1@1,2@1,3@1,4@1"], "--crash")]


@pytest.mark.parametrize("argv,message", INVALID, ids=["nan-lr", "huge-rounds", "crash"])
def test_main_prints_the_one_line_and_exits_2(argv: list[str], message: str, capsys, tmp_path) -> None:
    with pytest.raises(SystemExit) as stop:
        main([*BASE, *argv, "--out", str(tmp_path)])
    assert stop.value.code == 2 and not any(tmp_path.iterdir())  # before any training
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith(f"p2pfl: error: {message}"), err


@pytest.mark.mpi
@pytest.mark.parametrize("argv,message", INVALID, ids=["nan-lr", "huge-rounds", "crash"])
def test_every_rank_exits_2_under_mpirun(argv: list[str], message: str, runs_dir) -> None:
    proc = run_job(["-m", "p2pfl.run", *BASE, *argv, "--out", str(runs_dir)], ranks=3)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"p2pfl: error: {message}"), lines
    assert "Traceback" not in proc.stderr and not any(runs_dir.iterdir())
