"""The registry's seams: a component's resolve-time check (`check_resolved`, alie's attacker bound and a plug-in's),
the run modes as components (their rules with today's messages, byte for byte; --mode's choices from MODES), and
the clock turned on by the network model a run chooses (the links model's own options; a plug-in model needs no
--compute-time)."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from p2pfl import plugins
from p2pfl.byzantine import ATTACKS
from p2pfl.config import ConfigError, make_config, resolve
from p2pfl.modes import MODES
from p2pfl.network.clock import NETWORK_MODELS, ClockOptions
from p2pfl.run import main

ROOT = Path(__file__).resolve().parents[1]
CONSENSUS = ["--algorithm", "consensus", "--vector-size", "16", "--eval-every", "0", "--no-progress", "--no-plots"]

#: A plug-in network model whose rule needs the peer count: one peer a centre at most, known only once resolved.
CAPPED = '''
from p2pfl.network.clock import NETWORK_MODELS
from p2pfl.network.clock.links import Links
from p2pfl.options import opt


@NETWORK_MODELS.register("capped")
class Capped(Links):
    class Options:
        cap_peers: int = opt(8, "capped: the most peers the model times", section="time")

    @classmethod
    def check_resolved(cls, cfg, check):
        check(cfg.peers <= cfg.cap_peers, "cap_peers", f"times at most {cfg.cap_peers} peers, got {cfg.peers}")
'''

#: A plug-in mode: rounds, as sync runs them, under another name (its rules inherited).
ROUNDS = '''
from p2pfl.modes import MODES
from p2pfl.modes.sync import Sync


@MODES.register("lockstep")
class Lockstep(Sync):
    """Synchronous rounds under another name."""
'''


def _plugin(tmp_path: Path, name: str, source: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    plugins.load([str(path)])
    return str(path)


# ------------------------------------------------------------------ the resolve-time check

def test_alies_bound_is_its_own_resolve_time_check() -> None:
    """Alie refuses more than K/2 attackers once K is known: from --peers, and from the world size alike."""
    assert "check_resolved" in vars(ATTACKS.get("alie"))
    with pytest.raises(ConfigError) as refused:
        resolve(make_config(algorithm="consensus", peers=4, byzantine="3", attack="alie"), 1)
    assert str(refused.value) == "--attack: alie is defined for at most 2 attackers among 4 peers, got 3"
    with pytest.raises(ConfigError, match=r"^--attack: alie is defined for at most 10 attackers among 20 peers, "
                                          r"got 11$"):
        resolve(make_config(algorithm="consensus", byzantine="11", attack="alie"), 1)  # K: one process's 20
    assert resolve(make_config(algorithm="consensus", peers=4, byzantine="2", attack="alie"), 1).cfg.peers == 4
    resolve(make_config(algorithm="consensus", peers=4, byzantine="3", attack="sign-flip"), 1)  # alie's rule only


def test_a_plugin_components_resolve_time_check_refuses_in_one_line(tmp_path: Path, capsys) -> None:
    path = _plugin(tmp_path, "capped", CAPPED)
    cfg = make_config(algorithm="consensus", network_model="capped", cap_peers=3)  # K not known yet: accepted
    with pytest.raises(ConfigError) as refused:
        resolve(cfg, 1)  # K = 20, one process's default
    assert str(refused.value) == "--cap-peers: times at most 3 peers, got 20"
    assert resolve(make_config(algorithm="consensus", network_model="capped", cap_peers=3, peers=3), 1).cfg.peers == 3
    with pytest.raises(SystemExit) as stop:
        main([*CONSENSUS, "--plugin", path, "--network-model", "capped", "--cap-peers", "3", "--peers", "4",
              "--out", str(tmp_path / "runs")])
    assert stop.value.code == 2 and not (tmp_path / "runs").exists()
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == ["p2pfl: error: --cap-peers: times at most 3 peers, got 4"]


# ------------------------------------------------------------------ the run modes

@pytest.mark.parametrize(("options", "says"), [
    ({"updates": 5}, "--updates: belongs to --mode async (synchronous runs count --rounds and --eval-every)"),
    ({"sim_time": 1.0}, "--sim-time: belongs to --mode async (synchronous runs count --rounds and --eval-every)"),
    ({"eval_every_s": 1.0},
     "--eval-every-s: belongs to --mode async (synchronous runs count --rounds and --eval-every)"),
    ({"mode": "async", "algorithm": "scaffold", "compute_time": 1.0},
     "--mode: scaffold has no asynchronous form (its control variates travel as a second message, outside the "
     "pairwise mean)"),
    ({"mode": "async"}, "--mode: async orders its events by simulated time: give --compute-time or --compute-trace"),
    ({"mode": "async", "compute_time": 1.0, "compress": "top-k"},
     "--mode: async averages pairwise with dense models: --gossip average, --compress none"),
    ({"mode": "async", "compute_time": 1.0, "aggregator": "trimmed-mean"},
     "--mode: async averages pairwise by the plain mean: not with --byzantine, a robust --aggregator, --mixing server "
     "or --weight-by-data"),
    ({"mode": "async", "compute_time": 1.0, "churn": 0.1},
     "--mode: async runs on a static network of peers always up: not with --link-failure, --churn, --crash, "
     "--participation or --resample"),
    ({"mode": "async", "compute_time": 1.0, "algorithm": "fedavg", "schedule": "cosine"},
     "--schedule: --mode async counts no common rounds for a learning-rate schedule: use --schedule constant"),
    ({"mode": "async", "compute_time": 1.0, "algorithm": "fedavg", "fedbn": "type"},
     "--fedbn: --mode async averages and updates the whole model: use --fedbn off"),
    ({"mode": "async", "compute_time": 1.0, "fault": "nan@1:2"},
     "--fault: --mode async injects only raise@RANK:ROUND (a round: a batch of its events)"),
    ({"compute_time": -1.0}, "--compute-time: must be >= 0, got -1.0"),
    ({"straggler_slowdown": 0.5}, "--straggler-slowdown: must be >= 1, got 0.5"),
    ({"updates": -1}, "--updates: must be >= 0, got -1"),
    ({"latency": -0.5}, "--latency: must be >= 0, got -0.5"),
    ({"download_rate": -1.0}, "--download-rate: must be >= 0, got -1.0"),
    ({"compute_spread": 0.5},
     "--compute-spread: spreads --compute-time (> 0) around its median; not without it, nor with --compute-trace"),
    ({"compute_trace": "/nonexistent/trace.csv"}, "--compute-trace: file not found: /nonexistent/trace.csv"),
    ({"latency_matrix": "/nonexistent/lat.npy"}, "--latency-matrix: file not found: /nonexistent/lat.npy"),
])
def test_the_time_rules_say_what_they_said(options: dict, says: str) -> None:
    """The messages of config._validate_time before the rules moved to the modes and the clock, byte for byte."""
    with pytest.raises(ConfigError) as refused:
        resolve(make_config(**{"algorithm": "consensus", "peers": 4, **options}), 1)
    assert str(refused.value) == says


def test_modes_are_a_registry_and_a_plugin_mode_is_a_choice(tmp_path: Path) -> None:
    assert sorted(MODES.names()) == ["async", "sync"]
    with pytest.raises(ConfigError, match=r"^--mode: unknown value 'lockstep'; allowed: "):
        make_config(mode="lockstep")
    _plugin(tmp_path, "lockstep", ROUNDS)
    assert make_config(algorithm="consensus", mode="lockstep").mode == "lockstep"
    with pytest.raises(ConfigError, match=r"^--updates: belongs to --mode async"):
        make_config(algorithm="consensus", mode="lockstep", updates=3)  # Sync's rules, inherited
    assert MODES.get("lockstep").runner() is MODES.get("sync").runner()


# ------------------------------------------------------------------ the clock and its network model

def test_the_clock_is_on_as_before_for_the_built_ins() -> None:
    def clock(**options: object) -> bool:
        return make_config(algorithm="consensus", **options).clock

    assert not clock() and not clock(network_model="links")
    for options in ({"compute_time": 0.1}, {"compute_trace": str(ROOT / "README.md")}, {"latency": 0.1},
                    {"upload_rate": 1e6}, {"download_rate": 1e6}, {"mode": "async", "compute_time": 0.1}):
        assert clock(**options), options


def test_the_links_options_are_the_models_own() -> None:
    """Same flags, keys and defaults; the clock reads them off the model's options, not ClockOptions."""
    links = NETWORK_MODELS.get("links")
    assert {f for f in links.Options.__dataclass_fields__} == {"latency", "latency_matrix", "upload_rate",
                                                              "download_rate"}
    assert not {"latency", "latency_matrix", "upload_rate", "download_rate"} & set(ClockOptions.__dataclass_fields__)
    cfg = resolve(make_config(algorithm="consensus", peers=3, latency=0.25, upload_rate=1e3), 1).cfg
    options = ClockOptions.of(cfg)
    assert (options.model.latency, options.model.upload_rate, options.model.download_rate) == (0.25, 1e3, 0.0)


def test_a_plugin_network_model_keeps_the_clock_without_compute_time(tmp_path: Path) -> None:
    """examples/plugins/network_model.flags, with no --compute-time: the clock runs and times the latency."""
    plugin = ROOT / "examples" / "plugins" / "network_model.py"
    flags = (ROOT / "examples" / "plugins" / "network_model.flags").read_text().split()
    assert "--compute-time" not in flags
    plugins.load([str(plugin)])
    assert make_config(algorithm="consensus", network_model="data-centres").clock
    assert main([*flags, "--plugin", str(plugin), "--no-progress", "--no-plots", "--out", str(tmp_path),
                 "--name", "dc"]) == 0
    manifest = json.loads((tmp_path / "dc" / "manifest.json").read_text())
    assert manifest["clock"]["network_model"] == "data-centres" and manifest["clock"]["mode"] == "sync"
    rounds = [json.loads(line) for line in (tmp_path / "dc" / "metrics.jsonl").read_text().splitlines()]
    times = [r["sim_time_s"] for r in rounds if r["type"] == "round" and r["round"] >= 1]
    assert times and times[-1] > 0
