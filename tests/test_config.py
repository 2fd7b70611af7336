"""Bad input: one clear line on rank 0, a non-zero exit from every rank, no traceback, before any training."""
from __future__ import annotations

import pytest

from conftest import run_job
from p2pfl.config import ConfigError, make_config, parse_args, validate

BAD = [
    (["--topology", "moebius"], "--topology: unknown value 'moebius'"),
    (["--algorithm", "telepathy"], "--algorithm: unknown value 'telepathy'"),
    (["--peers", "1"], "--peers: need at least 2 peers"),
    (["--p", "1.5", "--topology", "random"], "--p: must lie in (0, 1]"),
    (["--p", "0"], "--p: must lie in (0, 1]"),
    (["--rounds", "-3"], "--rounds: must be >= 0"),
    (["--rounds", "ten"], "--rounds: expected int"),
    (["--mixing", "magic"], "--mixing: unknown value 'magic'"),
    (["--participation", "0"], "--participation: must lie in (0, 1]"),
    (["--topology", "file"], "--graph-file: required with --topology file"),
]


@pytest.mark.parametrize("argv,message", BAD)
def test_bad_values_name_the_option(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_args(argv)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_yaml_unknown_key(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("rounds: 3\nbogus_key: 1\n")
    with pytest.raises(ConfigError, match="unknown key 'bogus_key'"):
        parse_args(["--config", str(path)])


def test_cli_overrides_yaml(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("rounds: 3\ntopology: star\nlocal-epochs: 2\n")
    cfg, _ = parse_args(["--config", str(path), "--rounds", "7"])
    assert (cfg.rounds, cfg.topology, cfg.local_epochs) == (7, "star", 2.0)


def test_fewer_peers_than_ranks() -> None:
    with pytest.raises(ConfigError, match="3 peers cannot fill 4 MPI ranks"):
        validate(make_config(peers=3), world_size=4)


def test_print_config_round_trips(tmp_path) -> None:
    proc = run_job(["-m", "p2pfl.run", "--print-config", "--rounds", "4", "--topology", "star"], ranks=0)
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "resolved.yaml"
    path.write_text(proc.stdout)
    cfg, _ = parse_args(["--config", str(path)])
    assert cfg.rounds == 4 and cfg.topology == "star"


@pytest.mark.parametrize("ranks", [0, 2])
def test_bad_input_one_line_nonzero_exit_every_rank(ranks: int, runs_dir) -> None:
    proc = run_job(["-m", "p2pfl.run", "--topology", "moebius", "--out", str(runs_dir)], ranks=ranks)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == ["p2pfl: error: --topology: unknown value 'moebius'; allowed: " + lines[0].split("allowed: ")[1]]
    assert "Traceback" not in proc.stderr
    assert not any(runs_dir.iterdir())  # nothing started


@pytest.mark.mpi
def test_peers_fewer_than_ranks_under_mpirun(runs_dir) -> None:
    proc = run_job(["-m", "p2pfl.run", "--peers", "2", "--out", str(runs_dir)], ranks=4)
    assert proc.returncode != 0
    assert proc.stderr.count("p2pfl: error: --peers: 2 peers cannot fill 4 MPI ranks") == 1
    assert "Traceback" not in proc.stderr
