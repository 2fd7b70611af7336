"""The topologies' own parameters as flags (p2pfl.network.topology_options): --fanout, --max-degree, --active and
--inner are --topology-params KEY=V by another name (the same schedule, round for round), two values for one are
refused in one line, a flag the topology does not take and --mixing on a topology with its own weights are warned
of as ignored."""
from __future__ import annotations

import numpy as np
import pytest

import topologies
import topologies.dynamic
from p2pfl.cli import parse_args
from p2pfl.config import ConfigError, make_config
from p2pfl.network import NetworkOptions, NetworkSchedule


def net_of(**options) -> NetworkSchedule:
    cfg = make_config(algorithm="consensus", peers=12, **options)
    return NetworkSchedule.from_options(NetworkOptions.of(cfg), topologies.build("complete", 12))


@pytest.mark.parametrize(("topology", "flags", "params"), [
    ("epidemic", {"fanout": 3}, "fanout=3"),
    ("epidemic-oracle", {"fanout": 2}, "fanout=2"),
    ("k-peer-exponential", {"fanout": 2}, "fanout=2"),
    ("base", {"max_degree": 2}, "max_degree=2"),
    ("simple-base", {"max_degree": 1}, "max_degree=1"),
    ("teleport", {"active": 4, "inner": "star"}, "active=4,inner=star"),
])
def test_a_flag_is_its_topology_parameter(topology: str, flags: dict, params: str) -> None:
    by_flag = net_of(topology=topology, **flags)
    by_params = net_of(topology=topology, topology_params=params)
    assert by_flag.dynamic.params == by_params.dynamic.params == topologies.parse_params(params)
    for t in (1, 2, 5):
        a, b = by_flag.at(t), by_params.at(t)
        assert (a.adjacency != b.adjacency).nnz == 0 and np.array_equal(a.W.toarray(), b.W.toarray())
        assert a.active == b.active and a.handover == b.handover


def test_the_same_value_twice_is_accepted_and_two_values_refused() -> None:
    assert net_of(topology="epidemic", fanout=2, topology_params="fanout=2").dynamic.params == {"fanout": 2}
    with pytest.raises(ConfigError, match=r"^--topology-params: --fanout 2 and --topology-params fanout=3 disagree"):
        make_config(algorithm="consensus", topology="epidemic", fanout=2, topology_params="fanout=3")
    with pytest.raises(topologies.TopologyError, match=r"max_degree must be an integer >= 1, got 0"):
        net_of(topology="base", max_degree=0)


def test_every_declared_flag_is_a_parameter_of_its_owners() -> None:
    assert set(topologies.dynamic.FLAGS) == {"fanout", "max_degree", "active", "inner", "rows"}
    assert topologies.dynamic.flag_owners("fanout") == ["epidemic", "epidemic-oracle", "k-peer-exponential"]
    assert topologies.dynamic.flag_owners("max_degree") == ["base", "simple-base"]


@pytest.mark.parametrize(("argv", "line"), [
    (["--topology", "cycle", "--fanout", "2"],
     "--fanout is ignored: it is a parameter of topology epidemic, epidemic-oracle, k-peer-exponential, and "
     "--topology cycle does not take it"),
    (["--topology", "epidemic", "--fanout", "2", "--active", "3"],
     "--active is ignored: it is a parameter of topology teleport, and --topology epidemic does not take it"),
    (["--topology", "base", "--mixing", "uniform"],
     "--mixing is ignored: --topology base mixes by the weights of its construction"),
])
def test_what_the_topology_does_not_read_is_warned_of(argv: list[str], line: str) -> None:
    cfg, _ = parse_args(["--algorithm", "consensus", *argv])
    assert cfg.ignored == (line,)


@pytest.mark.parametrize("argv", [["--topology", "base", "--max-degree", "2"], ["--topology", "teleport", "--active",
                                                                                "3", "--mixing", "uniform"]])
def test_what_the_topology_reads_is_not_warned_of(argv: list[str]) -> None:
    cfg, _ = parse_args(["--algorithm", "consensus", *argv])
    assert cfg.ignored == ()
