"""The configuration: bad input (one clear line on rank 0, a non-zero exit from every rank, no traceback,
before any training), allowed values from their owners, the methods' own defaults, one frozen resolution."""
from __future__ import annotations

import dataclasses
import json

import pytest

from p2pfl.cli import parse_args
from p2pfl.config import ConfigError, make_config, resolve
from p2pfl.run import build_context, main

from conftest import ROOT, run_job
from helpers_inproc import world

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
    (["--algorithm", "scaffold", "--optimizer", "adam"], "--optimizer: scaffold allows only sgd, got 'adam'"),
    (["--round", "2"], "--round: unknown option"),  # no prefix of --rounds (YAML's `round:` is refused too)
    (["--local-step", "2"], "--local-step: unknown option"),
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
        resolve(make_config(peers=3), 4)


def test_print_config_round_trips(tmp_path) -> None:
    proc = run_job(["-m", "p2pfl.run", "--print-config", "--rounds", "4", "--topology", "star"], ranks=0)
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "resolved.yaml"
    path.write_text(proc.stdout)
    cfg, _ = parse_args(["--config", str(path)])
    assert cfg.rounds == 4 and cfg.topology == "star"


@pytest.mark.parametrize("ranks", [0, 2])
@pytest.mark.parametrize("argv,message", [BAD[0], BAD[-1]], ids=["topology", "scaffold-adam"])
def test_bad_input_one_line_nonzero_exit_every_rank(ranks: int, argv: list[str], message: str, runs_dir) -> None:
    proc = run_job(["-m", "p2pfl.run", *argv, "--out", str(runs_dir)], ranks=ranks)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("p2pfl: error: " + message)
    assert "Traceback" not in proc.stderr
    assert not any(runs_dir.iterdir())  # nothing started


@pytest.mark.mpi
def test_peers_fewer_than_ranks_under_mpirun(runs_dir) -> None:
    proc = run_job(["-m", "p2pfl.run", "--peers", "2", "--out", str(runs_dir)], ranks=4)
    assert proc.returncode != 0
    assert proc.stderr.count("p2pfl: error: --peers: 2 peers cannot fill 4 MPI ranks") == 1
    assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------------------------------------- method defaults

MOON_RECIPE = {"optimizer": "sgd", "lr": 0.01, "momentum": 0.9, "weight_decay": 1e-5, "batch_size": 64}


def _recipe(cfg) -> dict:
    return {k: getattr(cfg, k) for k in MOON_RECIPE}


@pytest.mark.parametrize("algorithm,mu", [("moon", 5.0), ("fedprox", 0.01), ("fedavg", 0.0), ("scaffold", 0.0),
                                          ("solo", 0.0)])
def test_moon_family_takes_its_papers_recipe(algorithm: str, mu: float) -> None:
    cfg = make_config(algorithm=algorithm)
    assert _recipe(cfg) == MOON_RECIPE and cfg.mu == mu
    assert set(MOON_RECIPE) <= set(cfg.from_method)


def test_other_methods_keep_the_project_defaults() -> None:
    cfg = make_config(algorithm="dec-sl")
    assert (cfg.optimizer, cfg.lr, cfg.weight_decay, cfg.batch_size, cfg.mu) == ("adam", 1e-3, 0.0, 128, 0.0)
    assert cfg.from_method == ()


def test_dec_ssl_family_takes_the_main_jobs_budget_and_its_own_recipes() -> None:
    """The Dec-SSL objectives share the main job's data and budget; each brings its own optimiser where its
    paper has one; a value the user gives wins."""
    budget = {"dataset": "cifar10", "partition": "iid", "batch_size": 32, "rounds": 10}
    for algorithm in ("dec-ssl", "dec-simsiam", "dec-byol", "dec-featarc"):
        cfg = make_config(algorithm=algorithm)
        assert {k: getattr(cfg, k) for k in budget} == budget and set(budget) <= set(cfg.from_method), algorithm
    assert make_config(algorithm="dec-ssl").temperature == 0.2
    simsiam = make_config(algorithm="dec-simsiam")
    assert (simsiam.optimizer, simsiam.lr, simsiam.momentum, simsiam.weight_decay) == ("sgd", 0.03, 0.9, 5e-4)
    assert "temperature" not in make_config(algorithm="dec-byol").from_method
    mae = make_config(algorithm="dec-mae")
    assert (mae.model, mae.optimizer, mae.weight_decay) == ("vit-tiny", "adamw", 0.05)
    assert mae.dataset == "fashion-mnist"  # the family's budget is SimCLR-style; MAE keeps the global default
    given = make_config(algorithm="dec-ssl", batch_size=128, partition="dirichlet", dataset="fashion-mnist")
    assert (given.batch_size, given.partition, given.dataset) == (128, "dirichlet", "fashion-mnist")


def test_explicit_values_win_on_the_command_line() -> None:
    cfg, _ = parse_args(["--algorithm", "moon", "--lr", "0.1", "--mu", "0", "--weight-decay", "1e-5"])
    assert (cfg.lr, cfg.mu, cfg.weight_decay, cfg.optimizer) == (0.1, 0.0, 1e-5, "sgd")
    assert {"lr", "mu", "weight_decay"}.isdisjoint(cfg.from_method) and "optimizer" in cfg.from_method


def test_explicit_values_win_in_yaml_and_make_config(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("algorithm: fedprox\noptimizer: adam\nbatch-size: 32\n")
    cfg, _ = parse_args(["--config", str(path), "--batch-size", "16"])
    assert (cfg.optimizer, cfg.batch_size, cfg.lr, cfg.mu) == ("adam", 16, 0.01, 0.01)
    assert make_config(algorithm="moon", temperature=0.1).temperature == 0.1


def test_scaffold_needs_sgd_from_yaml_too(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("optimizer: adamw\n")
    with pytest.raises(ConfigError, match="^--optimizer: scaffold allows only sgd, got 'adamw'$"):
        parse_args(["--config", str(path), "--algorithm", "scaffold"])


def test_print_config_shows_the_methods_defaults(tmp_path, capsys) -> None:
    assert main(["--print-config", "--algorithm", "fedprox", "--lr", "0.05"]) == 0
    text = capsys.readouterr().out
    assert "optimizer: sgd  # fedprox's default" in text and "mu: 0.01  # fedprox's default" in text
    assert "lr: 0.05\n" in text and "peers: 20\n" in text
    path = tmp_path / "resolved.yaml"
    path.write_text(text)
    cfg, _ = parse_args(["--config", str(path)])  # every option explicit now
    assert (cfg.optimizer, cfg.lr, cfg.mu, cfg.from_method) == ("sgd", 0.05, 0.01, ())


def test_config_yaml_and_manifest_record_the_methods_defaults(tmp_path) -> None:
    cfg = make_config(algorithm="moon", dataset="synthetic", peers=4, lr=0.02, out=str(tmp_path), name="run")
    build_context(world(), resolve(cfg, world().size), announce=False)
    run_dir = tmp_path / "run"
    saved, _ = parse_args(["--config", str(run_dir / "config.yaml")])
    assert _recipe(saved) == {**MOON_RECIPE, "lr": 0.02} and (saved.mu, saved.temperature) == (5.0, 0.5)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["method_defaults"] == {"optimizer": "sgd", "momentum": 0.9, "weight_decay": 1e-5,
                                           "batch_size": 64, "mu": 5.0, "temperature": 0.5}


# ---------------------------------------------------------------------------------------------- owners, resolution

def test_allowed_values_come_from_their_owners(monkeypatch) -> None:
    from p2pfl import optim
    from topologies.mixing import KINDS, register_mixing

    with pytest.raises(ConfigError, match="--mixing: unknown value 'lazy'"):
        make_config(mixing="lazy")
    register_mixing("lazy")(lambda a: a)
    try:
        assert make_config(mixing="lazy").mixing == "lazy"
    finally:
        del KINDS["lazy"]
    monkeypatch.setitem(optim.SCHEDULES, "warm", lambda lr, round, rounds: lr)
    assert make_config(schedule="warm").schedule == "warm"
    with pytest.raises(ConfigError, match="allowed: dirichlet, iid, inner-dirichlet, natural, one-class, pathological, "
                                          "quantity, shard, skew$"):
        make_config(partition="shards")


def test_configuration_is_frozen() -> None:
    cfg = make_config(peers=4)
    run = resolve(cfg, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.rounds = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.cfg.peers = 5  # type: ignore[misc]
    assert (cfg.peers, run.cfg.peers) == (4, 4)


def test_peers_come_from_the_world_then_the_spec() -> None:
    assert resolve(make_config(), 1).cfg.peers == 20
    assert resolve(make_config(), 3).cfg.peers == 3
    run = resolve(make_config(peers_spec=str(ROOT / "tests" / "golden" / "spec.yaml")), 1)
    assert run.cfg.peers == run.spec.n_peers == 4


def test_peers_spec_is_read_once_per_run(tmp_path, monkeypatch) -> None:
    import p2pfl.fedmuscle.peerspec as peerspec

    reads = []
    read = peerspec.read_spec_file
    monkeypatch.setattr(peerspec, "read_spec_file", lambda path: reads.append(path) or read(path))
    spec = str(ROOT / "tests" / "golden" / "spec.yaml")
    assert main(["--algorithm", "fedmuscle", "--peers-spec", spec, "--dataset", "synthetic", "--rounds", "0",
                 "--train-subset", "128", "--public-size", "100", "--public-batch", "8", "--rep-dim", "16",
                 "--threads", "1", "--device", "cpu", "--no-progress", "--no-plots", "--out", str(tmp_path)]) == 0
    assert reads == [spec]


def test_step_schedule_is_the_dec_ssl_codes_multistep_decay() -> None:
    """MultiStepLR(milestones=[int(0.3 T), int(0.6 T), int(0.9 T)], gamma=0.3) stepped once per 0-based round,
    written out for T = 10 (algorithms.md B.1) and T = 20."""
    from p2pfl.optim import lr_at
    cfg = make_config(schedule="step", lr=1e-3, rounds=10)
    expected = [1e-3] * 3 + [3e-4] * 3 + [9e-5] * 3 + [2.7e-5]
    assert [lr_at(cfg, r) for r in range(1, 11)] == pytest.approx(expected, rel=1e-12)
    cfg = make_config(schedule="step", lr=1.0, rounds=20)
    milestones = (6, 12, 18)  # int(0.3 * 20), ...
    assert [lr_at(cfg, r) for r in range(1, 21)] == pytest.approx(
        [0.3 ** sum(r - 1 >= m for m in milestones) for r in range(1, 21)], rel=1e-12)


def test_fedbn_takes_a_rule_and_the_older_boolean() -> None:
    assert make_config().fedbn == "off"
    assert make_config(fedbn="decssl").fedbn == "decssl"
    assert make_config(fedbn=True).fedbn == "type" and make_config(fedbn="false").fedbn == "off"
    with pytest.raises(ConfigError, match="--fedbn: unknown value 'sometimes'"):
        make_config(fedbn="sometimes")


@pytest.mark.parametrize("option, value", [("size_band", 1.0), ("size_band", 0.0), ("crop_scale", 0.0),
                                           ("crop_scale", 1.5), ("mask_ratio", 1.0), ("byol_tau", 1.0),
                                           ("clusters", 0), ("reg_scale", -1.0)])
def test_ssl_options_out_of_range_are_one_line_errors(option: str, value: float) -> None:
    with pytest.raises(ConfigError, match=f"^--{option.replace('_', '-')}: must"):
        make_config(**{option: value})
