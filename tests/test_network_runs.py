"""Runs over changing and failing networks: gossip keeps the mean and reaches consensus, the one-peer exponential
graph averages exactly, the server equals FedAvg, crashed peers' neighbours go on, returning peers catch up,
stragglers do less, and the same seed gives the same metrics on 1, 2 and 4 ranks."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from p2pfl.run import main
from topologies import mixing_of

from conftest import run_job, same_records_on_ranks
from helpers_inproc import setup_algorithm

CONSENSUS = ["--algorithm", "consensus", "--peers", "8", "--vector-size", "200", "--eval-every", "0",
             "--no-progress", "--no-plots", "--seed", "2", "--vector-dtype", "float64"]


def records(run_dir: Path) -> tuple[list[dict], dict]:
    """The round records and the final evaluation of a run folder."""
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in lines if r["type"] == "round"], next(r for r in lines if r["type"] == "eval" and r["final"])


def run(tmp_path: Path, name: str, *args: str) -> tuple[list[dict], dict]:
    assert main([*args, "--out", str(tmp_path), "--name", name]) == 0
    return records(tmp_path / name)


@pytest.mark.parametrize("network", [
    ["--topology", "cycle", "--link-failure", "0.3"],
    ["--topology", "cycle", "--churn", "0.3"],
    ["--topology", "binary-tree", "--churn", "0.2", "--link-failure", "0.2", "--participation", "0.75",
     "--rounds", "1200"],
    ["--topology", "random", "--p", "0.3", "--resample"],
    ["--topology", "random-matching"],
    ["--topology", "cycle", "--crash", "3@5", "--link-failure", "0.1"],  # the cycle less peer 3: a path
], ids=["links", "churn", "tree-all", "resample", "matching", "crash"])
def test_gossip_keeps_the_mean_and_reaches_consensus(tmp_path: Path, network: list[str]) -> None:
    rounds, final = run(tmp_path, "c", *CONSENSUS, "--rounds", "300", *network)
    assert final["metrics"]["mean_shift"] < 1e-12  # Metropolis on each round's surviving subgraph (float64)
    distances = [r["consensus_distance"] for r in rounds]
    assert distances[0] > 0.5 and distances[-1] < 1e-12
    assert final["metrics"]["distance_to_mean_peer_max"] < 1e-6


def test_crashed_peers_stop_and_their_neighbours_go_on(tmp_path: Path) -> None:
    rounds, final = run(tmp_path, "c", *CONSENSUS, "--rounds", "30", "--topology", "cycle", "--crash", "3@5,6@20")
    for r in rounds[1:]:
        crashed = [3] * (r["round"] >= 5) + [6] * (r["round"] >= 20)
        assert r["network"]["crashed"] == crashed
        assert not set(crashed) & set(r["active"])
        assert r["bytes_sent_per_peer"].get("3", 0) == (0 if r["round"] >= 5 else 2 * 1600)
    assert sorted(map(int, final["per_peer"])) == [0, 1, 2, 4, 5, 7]  # the survivors are evaluated
    summary = json.loads((tmp_path / "c" / "summary.json").read_text())["network"]
    # the cycle offers 16 links a round; 3 takes 4 of them for rounds 5-30, 6 two more for rounds 20-30
    expected = (4 * 16 + 15 * 12 + 11 * 8) / 30
    assert summary == {"kind": "static", "links_per_round": pytest.approx(expected), "topology_links_per_round": 16.0,
                       "crashed": [3, 6]}


def test_one_peer_exponential_reaches_the_exact_average_in_log2_k_rounds(tmp_path: Path) -> None:
    rounds, final = run(tmp_path, "c", *CONSENSUS, "--rounds", "4", "--topology", "one-peer-exponential")
    distances = [r["consensus_distance"] for r in rounds]
    assert distances[2] > 1e-3 and distances[3] < 1e-28  # K = 8: exact after 3 rounds (float64 rounding)
    assert final["metrics"]["mean_shift"] < 1e-14
    assert all(r["network"]["links"] == 8 for r in rounds[1:])  # one message per peer and round


def test_server_on_a_star_equals_complete_uniform_and_counts_the_hubs_bytes(tmp_path: Path) -> None:
    server = setup_algorithm(tmp_path / "s", algorithm="consensus", peers=6, topology="star", mixing="server",
                             vector_size=50)
    fedavg = setup_algorithm(tmp_path / "f", algorithm="consensus", peers=6, topology="complete", mixing="uniform",
                             vector_size=50)
    expected = torch.stack([peer.x for peer in fedavg.peers.values()]).double().mean(0)
    for algo in (server, fedavg):
        algo.communicate(1, algo.ctx.schedule.at(1))
    for p in range(6):
        assert torch.equal(server.peers[p].x, fedavg.peers[p].x)  # same weights, same order: bit for bit
        torch.testing.assert_close(server.peers[p].x.double(), expected, rtol=0, atol=1e-6)
    stats, vector = server.ctx.transport.stats, 50 * 4
    assert stats.peer_sent[0] == stats.peer_recv[0] == 5 * vector  # the hub: up from 5 leaves, back to them
    assert all(stats.peer_sent[p] == stats.peer_recv[p] == vector for p in range(1, 6))


def test_weight_by_data_off_complete_uniform_warns_once(tmp_path: Path, capsys) -> None:
    fedavg = ["--algorithm", "fedavg", "--peers", "4", "--dataset", "synthetic", "--train-subset", "64",
              "--local-steps", "1", "--batch-size", "8", "--eval-every", "0", "--zeta2-batch", "0", "--no-progress",
              "--no-plots", "--rounds", "1", "--weight-by-data"]
    run(tmp_path, "c", *fedavg, "--topology", "cycle")
    lines = [line for line in capsys.readouterr().err.splitlines() if "warning" in line and "at chance" not in line]
    assert len(lines) == 1 and "--weight-by-data on cycle/metropolis" in lines[0] and "biased consensus" in lines[0]
    run(tmp_path, "d", *fedavg, "--topology", "complete", "--mixing", "uniform")  # one round: at chance, said so
    err = capsys.readouterr().err.splitlines()
    assert [line for line in err if "warning" in line and "at chance" not in line] == []
    run(tmp_path, "e", *CONSENSUS, "--rounds", "1", "--topology", "cycle", "--weight-by-data")
    lines = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert lines == ["p2pfl: warning: --weight-by-data is ignored: consensus averages random vectors: it reads no "
                     "data and trains no model"]  # no data, no shard sizes: W stays doubly stochastic


def test_a_schedule_that_leaves_a_peer_alone_is_refused_before_training(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*CONSENSUS, "--rounds", "3", "--topology", "cycle", "--peers", "4", "--crash", "1@1,3@1",
              "--out", str(tmp_path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["p2pfl: error: --crash 1@1,3@1: peer(s) [0, 2] would have no neighbour up in any round"]
    assert not any(tmp_path.iterdir())


TRAIN = {"dataset": "synthetic", "train_subset": 240, "batch_size": 16, "optimizer": "sgd", "lr": 0.05}


def _fill(algo, generator: torch.Generator) -> None:
    for peer in algo.peers.values():
        with torch.no_grad():
            for t in peer.model.parameters():
                t.copy_(torch.randn(t.shape, generator=generator))


@pytest.mark.parametrize("rejoin", ["mix", "stale"])
def test_a_returning_peer_first_takes_its_fresh_neighbours_mix(tmp_path: Path, rejoin: str) -> None:
    algo = setup_algorithm(tmp_path, algorithm="fedavg", peers=6, topology="complete", mixing="uniform",
                           participation=0.5, rejoin=rejoin, **TRAIN)
    net = next(n for n in map(algo.ctx.schedule.at, range(2, 30)) if n.rejoining and n.fresh)
    _fill(algo, torch.Generator().manual_seed(0))
    before = {p: peer.mixable.flatten().clone() for p, peer in algo.peers.items()}
    algo.rejoin(net.round, net)
    fresh_mean = torch.stack([before[q] for q in sorted(net.fresh)]).mean(0)
    for p, peer in algo.peers.items():
        now = peer.mixable.flatten()
        if p in net.rejoining and rejoin == "mix":  # complete/uniform: the FedAvg model of the last round
            torch.testing.assert_close(now, fresh_mean, rtol=0, atol=1e-6)
        else:
            assert torch.equal(now, before[p])


def test_stragglers_do_their_share_of_the_local_steps(tmp_path: Path) -> None:
    algo = setup_algorithm(tmp_path, algorithm="fedavg", peers=8, local_steps=6, stragglers=0.25,
                           straggler_work=0.34, **TRAIN)
    net = algo.ctx.schedule.at(1)
    slow = set(net.work)
    assert len(slow) == 2
    batches = {p: 0 for p in algo.peers}
    for p, peer in algo.peers.items():
        def counted(size: int, p: int = p, draw=peer.data.next_batch):
            batches[p] += 1
            return draw(size)
        peer.data.next_batch = counted
    for p in algo.peers:
        assert algo.steps(algo.peers[p], net) == (2 if p in slow else 6)
        algo.local_update(p, 1, net)
    assert batches == {p: 2 if p in slow else 6 for p in algo.peers}


def test_training_with_crashes_finishes_and_evaluates_the_survivors(tmp_path: Path) -> None:
    args = ["--algorithm", "fedavg", "--peers", "6", "--rounds", "3", "--topology", "cycle", "--eval-every", "0",
            "--dataset", "synthetic", "--train-subset", "240", "--batch-size", "16", "--local-steps", "2",
            "--crash", "1@2,4@2", "--no-progress"]
    rounds, final = run(tmp_path, "t", *args)
    assert [r["network"]["crashed"] for r in rounds[1:]] == [[], [1, 4], [1, 4]]
    assert sorted(rounds[3]["loss"]) == ["0", "2", "3", "5"]
    assert sorted(map(int, final["per_peer"])) == [0, 2, 3, 5]
    plots = {p.name for p in (tmp_path / "t" / "plots").iterdir()}
    assert {"consensus.png", "per_peer_degree.png"} <= plots


@pytest.mark.mpi
def test_a_lonely_peer_ends_every_rank_with_one_line(tmp_path: Path) -> None:
    proc = run_job(["-m", "p2pfl.run", *CONSENSUS, "--rounds", "3", "--topology", "cycle", "--peers", "6",
                    "--crash", "1@1,3@1", "--out", str(tmp_path)], ranks=2)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("p2pfl:")]
    assert errors == ["p2pfl: error: --crash 1@1,3@1: peer(s) [2] would have no neighbour up in any round"]


@pytest.mark.mpi
def test_every_kind_gives_the_same_metrics_on_1_2_4_ranks(tmp_path: Path) -> None:
    records = same_records_on_ranks("tests/mpi/network_runs.py", tmp_path)
    assert len(records) == 10
    assert records["churn-crash"][-1]["round"] == 6


def test_the_manifest_describes_the_topologys_own_weights_not_one_rounds_failures(tmp_path: Path) -> None:
    """Link failures are per-round draws (described under `network`): the topology record keeps the cycle's
    Metropolis weights, 1/3 on each neighbour and itself (8 peers, so every row has exactly three 1/3 entries)."""
    run(tmp_path, "lossy", *CONSENSUS, "--rounds", "2", "--topology", "cycle", "--link-failure", "0.5")
    manifest = json.loads((tmp_path / "lossy" / "manifest.json").read_text())
    W = torch.tensor(mixing_of(manifest["topology"]), dtype=torch.float64)
    assert manifest["network"]["link_failure"] == 0.5
    assert torch.allclose(W, W.T) and all(sorted(row.tolist())[-3:] == pytest.approx([1 / 3] * 3) for row in W)
    assert int((W > 0).sum()) == 3 * 8
