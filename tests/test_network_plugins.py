"""The network's plug-ins (examples/plugins/network_model.py, topology.py) against what is computed here by hand:
the data-centre model's latencies and a 3-peer round's simulated seconds; the duty-cycled one-peer exponential
graph's active peers, links and weights per round; the topology's parameter reaching it and bad ones refused
naming the option; the default clock model unchanged."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import topologies
from p2pfl import plugins
from p2pfl.config import ConfigError, make_config, resolve
from p2pfl.network import NetworkOptions, NetworkSchedule
from p2pfl.network.clock import NETWORK_MODELS, ClockOptions, build
from p2pfl.network.timing import NetworkModel, bandwidths, compute_times, latencies

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", autouse=True)
def loaded() -> None:
    """The two examples registered, as --plugin registers them (forgotten after this module: conftest)."""
    plugins.load([str(ROOT / "examples" / "plugins" / f"{name}.py") for name in ("network_model", "topology")])


CONSENSUS = ["--algorithm", "consensus", "--vector-size", "250", "--eval-every", "0", "--no-progress", "--no-plots",
             "--seed", "3"]


def _run(tmp_path: Path, name: str, *args: str) -> tuple[list[dict], dict]:
    from p2pfl.run import main
    assert main([*args, "--out", str(tmp_path), "--name", name]) == 0
    lines = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    manifest = json.loads((tmp_path / name / "manifest.json").read_text())
    return [r for r in lines if r["type"] == "round" and r["round"] >= 1], manifest


# ------------------------------------------------------------------ the clock's network model

def _clock(**options: object) -> ClockOptions:
    cfg = resolve(make_config(algorithm="consensus", peers=3, **options), 1).cfg
    return ClockOptions.of(cfg)


def test_the_default_model_is_todays_links_bit_for_bit() -> None:
    """--network-model links (the default) builds exactly the arrays of the time options, stragglers slowed."""
    options = _clock(compute_time=0.5, compute_spread=0.3, latency=0.02, upload_rate=1e5, seed=7,
                     straggler_slowdown=4.0)
    assert options.network_model == "links"
    got = build(options, 3, slow=(1,))
    want = NetworkModel(compute_times(3, 7, 0.5, 0.3, None, (1,), 4.0), latencies(3, 0.02), bandwidths(3, 1e5),
                        bandwidths(3, 0.0))
    for name in ("compute", "latency", "upload", "download"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    assert got.describe()["network_model"] == "links"


def test_data_centres_latency_and_a_three_peer_round_by_hand() -> None:
    """3 peers in 2 centres: peers 0, 1 in centre 0 and peer 2 in centre 1 (⌊i·2/3⌋); on the star (hub 0) a
    round of S-byte messages costs leaf 1 the near latency, leaf 2 and the hub the far one, and lasts c + far."""
    assert "data-centres" in NETWORK_MODELS
    c, near, far = 0.25, 0.001, 0.04
    model = build(_clock(network_model="data-centres", compute_time=c, dc_near=near, dc_far=far), 3)
    assert model.latency.tolist() == [[near, near, far], [near, near, far], [far, far, near]]
    assert model.compute.tolist() == [c, c, c]
    sizes = {(0, 1): 1000, (1, 0): 1000, (0, 2): 1000, (2, 0): 1000}
    timed = model.round_time({0: 1, 1: 1, 2: 1}, sizes)
    assert timed.duration == c + far
    assert timed.transfer == {0: far, 1: near, 2: far}
    assert timed.idle == {0: 0.0, 1: (c + far) - (c + near), 2: 0.0}
    assert model.describe()["data_centre"] == [0, 0, 1]


def test_data_centres_options_are_checked_naming_the_option() -> None:
    with pytest.raises(ConfigError, match=r"^--dc-far: must be >= 0"):
        resolve(make_config(algorithm="consensus", peers=3, network_model="data-centres", dc_far=-1.0), 1)
    with pytest.raises(ConfigError, match=r"^--dc-centres: 4 centres for 3 peers"):
        resolve(make_config(algorithm="consensus", peers=3, network_model="data-centres", dc_centres=4), 1)


def test_data_centres_run_times_each_round_by_hand(tmp_path: Path) -> None:
    """The run end to end on the 3-peer star: every round's simulated seconds are c + far, per peer as above."""
    c, near, far = 0.5, 0.002, 0.03
    rounds, manifest = _run(tmp_path, "dc", *CONSENSUS, "--peers", "3", "--rounds", "3", "--topology", "star",
                            "--network-model", "data-centres", "--compute-time", str(c), "--dc-near", str(near),
                            "--dc-far", str(far))
    assert len(rounds) == 3
    for t, record in enumerate(rounds, start=1):
        assert record["sim_round_s"] == pytest.approx(c + far, rel=1e-12)
        assert record["sim_transfer_s"] == pytest.approx({"0": far, "1": near, "2": far}, rel=1e-12)
        assert record["sim_time_s"] == pytest.approx(t * (c + far), rel=1e-12)
    clock = manifest["clock"]
    assert clock["network_model"] == "data-centres" and clock["data_centre"] == [0, 0, 1]
    assert clock["network_model_options"] == {"dc_centres": 2, "dc_near": near, "dc_far": far}


# ------------------------------------------------------------------ a per-round topology with a parameter

#: K = 4, period 3, hops 1, 2, 1: round t's sleeping peers ((i + t) % 3 == 0) and (receiver, sender) links.
DUTY = {1: ({2}, {(0, 1), (3, 0)}), 2: ({1}, {(0, 2), (2, 0)}), 3: ({0, 3}, {(1, 2)})}


def test_duty_exponential_rounds_by_hand() -> None:
    duty = topologies.DYNAMIC["duty-exponential"].bind(period=3)
    for t, (asleep, links) in DUTY.items():
        rnd = duty.round(4, 0, t)
        assert rnd.active == frozenset(range(4)) - asleep
        assert {(i, j) for j, i in rnd.links.edges} == links


def test_the_schedule_honours_the_topologys_active_peers() -> None:
    """The active set is the topology's; a sleeping peer has no link and keeps its vector (W_ii = 1); an awake
    one averages uniformly over its closed in-neighbourhood (a one-way graph); the schedule loses peers."""
    cfg = resolve(make_config(algorithm="consensus", peers=4, topology="duty-exponential",
                              topology_params="period=3"), 1).cfg
    from p2pfl.run import support_graph
    schedule = NetworkSchedule.from_options(NetworkOptions.of(cfg), support_graph(cfg, 4))
    assert schedule.directed and schedule.lossy
    for t, (asleep, links) in DUTY.items():
        net = schedule.at(t)
        assert net.active == frozenset(range(4)) - asleep
        assert {(int(i), int(j)) for i, j in zip(*net.adjacency.nonzero())} == links
        w = net.W.toarray()
        for i in range(4):
            heard = [j for r, j in links if r == i]
            want = np.zeros(4)
            want[[i, *heard]] = 1.0 / (1 + len(heard))
            assert w[i].tolist() == want.tolist(), (t, i)
    assert [schedule.at(t).rejoining for t in (2, 3)] == [{2}, {1}]  # back after sleeping: stale, mixed first


def test_the_parameter_reaches_the_topology_and_bad_ones_name_the_option() -> None:
    duty = topologies.DYNAMIC["duty-exponential"]
    assert duty.bind(period=2).round(4, 0, 1).active == {0, 2}  # (i + 1) % 2 == 0 sleeps: 1 and 3
    assert topologies.topology_params("duty-exponential", "period=5") == {"period": 5}
    with pytest.raises(ConfigError, match=r"^--topology-params: topology 'duty-exponential' does not take q; it "
                                          r"takes: period$"):
        resolve(make_config(algorithm="consensus", peers=4, topology="duty-exponential", topology_params="q=1"), 1)
    with pytest.raises(ConfigError, match=r"^--topology-params: .*expected KEY=VALUE"):
        make_config(algorithm="consensus", peers=4, topology="duty-exponential", topology_params="period")
    with pytest.raises(ConfigError, match=r"^--topology-params: topology 'cycle' does not take period; it takes: "
                                          r"no parameters$"):
        make_config(algorithm="consensus", peers=4, topology="cycle", topology_params="period=3")


def test_static_topologies_take_their_parameters_too() -> None:
    """--topology-params reaches a static topology's function: random's p overrides --p."""
    from p2pfl.run import support_graph
    cfg = resolve(make_config(algorithm="consensus", peers=12, topology="random", topology_params="p=1.0"), 1).cfg
    assert support_graph(cfg, 12).number_of_edges() == 12 * 11 // 2


def test_existing_dynamic_topologies_bound_to_nothing_are_unchanged() -> None:
    """bind() with no parameters gives the function's own graphs, every peer active, the same support."""
    for name in ("random-matching", "one-peer-exponential"):
        dyn = topologies.DYNAMIC[name]
        assert not dyn.chooses_active
        for t in (1, 2, 3):
            rnd = dyn.bind().round(9, 4, t)
            assert sorted(rnd.links.edges) == sorted(dyn.links(9, 4, t).edges) and rnd.active == set(range(9))
        assert sorted(dyn.bind().support_of(9).edges) == sorted(dyn.support(9).edges)


def test_duty_exponential_run_records_the_active_peers_and_links(tmp_path: Path) -> None:
    """The run end to end: round t's network record lists the awake peers' in-degrees and the links above."""
    rounds, manifest = _run(tmp_path, "duty", *CONSENSUS, "--peers", "4", "--rounds", "3", "--topology",
                            "duty-exponential", "--topology-params", "period=3")
    for record in rounds:
        asleep, links = DUTY[record["round"]]
        degrees = {str(i): sum(r == i for r, _ in links) for i in range(4) if i not in asleep}
        assert record["network"]["degree"] == degrees
        assert record["network"]["links"] == len(links)
    assert manifest["network"]["kind"] == "duty-exponential"


def test_topologies_import_nothing_of_p2pfl() -> None:
    """The border: `import topologies` (every built-in registered, statistics included) loads no p2pfl module,
    no torch and no matplotlib."""
    import subprocess
    code = ("import sys, topologies; topologies.build('random', 8, seed=1, p=0.5); "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('p2pfl', 'torch', 'matplotlib')); "
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
