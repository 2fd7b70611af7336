"""Issue 39, items 8-10: sizes have bounds, set-up errors are one line naming their option or file, and values
that used to be taken silently (a seed past 32 bits, a boolean count, NaN in a graph, a fault at no one) are
refused."""
from __future__ import annotations

import re
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from p2pfl.cli import parse_args
from p2pfl.config import ConfigError, resolve
from p2pfl.network import timing
from p2pfl.run import build_network, main
from p2pfl.study import StudyError, load_study
from topologies.base import TopologyError

from conftest import run_job

BASE = ["--algorithm", "consensus", "--peers", "4", "--rounds", "2", "--vector-size", "5", "--no-plots",
        "--no-progress"]

#: 10 anchors of 9 aliases each: 9**10 leaves once written out, in 400 bytes.
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{b}: &{b} [{', '.join(['*' + a] * 9)}]\n" for a, b in zip("abcdefghi", "bcdefghij"))


def _refused(argv: list[str]) -> str:
    with pytest.raises(ConfigError) as caught:
        resolve(parse_args(argv)[0], 1)
    return str(caught.value)


def _peak_bytes(step) -> int:
    """The most memory Python allocated while `step` ran (it is expected to raise)."""
    tracemalloc.start()
    try:
        with pytest.raises(ValueError):
            step()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# item 8: bounds

@pytest.mark.parametrize("key", ["rounds", "topology", "j"])
def test_an_alias_bomb_is_one_short_line_in_bounded_memory(key: str, tmp_path: Path) -> None:
    assert len(BOMB) < 430
    config = tmp_path / "bomb.yaml"
    config.write_text(BOMB.replace("j: &j", f"{key}: &j") if key != "j" else BOMB)
    study = tmp_path / "study.yaml"
    study.write_text(BOMB.replace("a: &a", "x: &a").replace("j: &j", "base: {rounds: *i}\nj: &j"))
    for step, error in ((lambda: parse_args(["--config", str(config)]), ConfigError),
                        (lambda: load_study(study), StudyError)):
        parse_args([])  # everything imported before measuring
        peak = _peak_bytes(step)
        with pytest.raises(error) as caught:
            step()
        message = str(caught.value)
        assert "\n" not in message and len(message) < 300 and "aliases (*name) are not accepted" in message
        assert peak < 2 << 20, peak


@pytest.mark.parametrize("argv,message", [
    (["--peers", "1e12"], "--peers: 1000000000000 peers exceed the limit of 1000000 "),
    (["--peers", str(10 ** 12)], "--peers: 1000000000000 peers exceed the limit of 1000000 "),
    (["--threads", "100000"], "--threads: must lie in [1, 1024] "),
], ids=["peers-1e12", "peers-10**12", "threads"])
def test_sizes_over_their_limit_are_one_line_stating_it(argv: list[str], message: str, capsys, tmp_path) -> None:
    assert _refused([*BASE, *argv]).startswith(message)
    with pytest.raises(SystemExit) as stop:
        main([*BASE, *argv, "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and err == [f"p2pfl: error: {_refused([*BASE, *argv])}"]
    assert not any(tmp_path.iterdir())


def test_the_peer_limit_is_the_users_to_raise(monkeypatch) -> None:
    monkeypatch.setenv("P2PFL_MAX_PEERS", "3")
    assert "exceed the limit of 3 " in _refused(BASE)
    monkeypatch.setenv("P2PFL_MAX_PEERS", "10")
    assert resolve(parse_args(BASE)[0], 1).cfg.peers == 4


@pytest.mark.parametrize("argv", [["--topology", "r" * 100_000], ["--rounds", "9" * 3000 + "x"],
                                  ["--lr", "x" * 100_000]])
def test_an_echoed_value_is_cut_to_a_short_prefix(argv: list[str]) -> None:
    message = _refused([*BASE, *argv])
    echoed = message.split("; allowed: ", 1)[0]  # the choices a registry lists grow with its components
    longest_run = max(len(m.group()) for m in re.finditer(r"(.)\1*", echoed))
    assert message.startswith(argv[0]) and len(echoed) < 200 and longest_run <= 100 and "..." in echoed


# item 9: set-up errors name their option or file

def test_a_binary_or_non_numeric_input_file_names_its_option(tmp_path: Path) -> None:
    binary = tmp_path / "blob.txt"
    binary.write_bytes(bytes(range(256)) * 4)
    letters = tmp_path / "lat.txt"
    letters.write_text("0 a 1 1\n1 0 1 1\n1 1 0 1\n1 1 1 0\n")
    cfg = resolve(parse_args([*BASE, "--topology", "file", "--graph-file", str(binary)])[0], 1).cfg
    with pytest.raises(TopologyError, match=f"^graph file {binary}: not a UTF-8 text edge list"):
        build_network(cfg)
    with pytest.raises(ValueError, match=f"^--compute-trace {binary}: not a table of numbers"):
        timing.compute_times(4, 0, 0.0, trace=binary)
    with pytest.raises(ValueError, match=f"^--latency-matrix {letters}: not a table of numbers"):
        timing.latencies(4, matrix=letters)
    assert _refused([*BASE, "--train-subset", "-5"]) == "--train-subset: must be >= 1 training images, got -5"


def test_an_out_that_is_a_file_is_one_line_naming_out(tmp_path: Path, capsys) -> None:
    out = tmp_path / "a-file"
    out.write_text("")
    with pytest.raises(SystemExit) as stop:
        main([*BASE, "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and err[0].startswith(f"p2pfl: error: --out: cannot create the "
                                                                       f"run folder {out}/"), err


@pytest.mark.mpi
def test_a_set_up_error_is_one_line_and_exit_2_on_every_rank(tmp_path: Path) -> None:
    out = tmp_path / "a-file"
    out.write_text("")
    proc = run_job(["-m", "p2pfl.run", *BASE, "--out", str(out)], ranks=2, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("p2pfl: error: --out: cannot create the run folder"), lines


# item 10: values no longer taken silently

@pytest.mark.parametrize("seed", ["4294967296", "-1"])
def test_a_seed_outside_32_bits_is_refused(seed: str) -> None:
    assert _refused([*BASE, "--seed", seed]) == f"--seed: must lie in [0, 4294967295] (every random stream is " \
                                                f"keyed by 32 bits), got {seed}"
    assert resolve(parse_args([*BASE, "--seed", "4294967295"])[0], 1).cfg.seed == 4294967295


@pytest.mark.parametrize("text,flag", [("rounds: true", "--rounds"), ("lr: false", "--lr"), ("peers: yes", "--peers")])
def test_a_boolean_is_not_a_number(text: str, flag: str, tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match=f"^{flag}: expected (int|float), got the boolean (True|False)$"):
        parse_args(["--config", str(path)])


def test_nan_in_an_adjacency_matrix_is_refused(tmp_path: Path) -> None:
    matrix = np.ones((4, 4)) - np.eye(4)
    matrix[0, 2] = matrix[2, 0] = np.nan
    text, npy = tmp_path / "g.txt", tmp_path / "g.npy"
    text.write_text("\n".join(" ".join(str(v) for v in row) for row in matrix) + "\n")
    np.save(npy, matrix)
    for path in (text, npy):
        cfg = resolve(parse_args([*BASE, "--topology", "file", "--graph-file", str(path)])[0], 1).cfg
        with pytest.raises(TopologyError, match=f"^graph file {path}: adjacency matrix entries must be finite"):
            build_network(cfg)


@pytest.mark.parametrize("fault,world,message", [
    ("nan@99:1", 1, "--fault: peer 99 does not exist (peers are 0..3)"),
    ("silent@4:1", 2, "--fault: peer 4 does not exist (peers are 0..3)"),
    ("raise@7:1", 2, "--fault: rank 7 does not exist (ranks are 0..1)"),
])
def test_a_fault_at_no_one_is_refused(fault: str, world: int, message: str) -> None:
    cfg = parse_args([*BASE, "--fault", fault])[0]
    with pytest.raises(ConfigError) as caught:
        resolve(cfg, world)
    assert str(caught.value) == message
    assert resolve(parse_args([*BASE, "--fault", "raise@1:1"])[0], 2).cfg.fault == "raise@1:1"
