"""Nothing poisoned: a non-finite message is rejected as a failed link, a non-finite update is rolled back, and
--on-nonfinite abort ends the job naming the peer."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from p2pfl.network import NetworkSchedule
from p2pfl.run import main
from p2pfl.runtime.files import loads

from helpers_inproc import setup_algorithm

FEDAVG = ["--algorithm", "fedavg", "--peers", "6", "--rounds", "3", "--topology", "cycle", "--dataset", "synthetic",
          "--train-subset", "240", "--batch-size", "16", "--local-steps", "2", "--eval-every", "0", "--no-progress",
          "--no-plots"]


def lines(run_dir: Path) -> list[dict]:
    return [loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]  # "NaN" -> nan


@pytest.mark.parametrize("aggregator", ["mean", "trimmed-mean", "median", "clipped-gossip"])
def test_a_nan_neighbour_is_a_failed_link(tmp_path: Path, monkeypatch, capsys, aggregator: str) -> None:
    """Peer 2 sends NaN from round 2: its neighbours 1 and 3 reject it, and every metric equals a run in which
    the links 1-2 and 2-3 failed in rounds 2 and 3, the round records' networks included (neighbour drift
    aside: it is measured on the graph), whatever the aggregator (the robust ones check only the messages of a
    peer whose result is not finite)."""
    options = [*FEDAVG, "--aggregator", aggregator]
    assert main([*options, "--fault", "nan@2:2", "--out", str(tmp_path), "--name", "nan"]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "warning" in line and "at chance" not in line]
    assert warned == [f"p2pfl: warning: round {t}: rejected non-finite messages (receiver <- sender) 1 <- 2, 3 <- 2"
                      for t in (2, 3)]
    at = NetworkSchedule.at

    def failed(self, t, active=None):
        net = at(self, t, active)
        return net.without([(1, 2), (3, 2)]) if t >= 2 else net

    monkeypatch.setattr(NetworkSchedule, "at", failed)
    assert main([*options, "--out", str(tmp_path), "--name", "links"]) == 0
    nan, links = lines(tmp_path / "nan"), lines(tmp_path / "links")
    assert [r.get("rejected") for r in nan if r["type"] == "round"] == [None, [], [[1, 2], [3, 2]], [[1, 2], [3, 2]]]
    for a, b in zip(nan, links):
        if a["type"] == "round" and a["round"] == 0:
            assert a == b
        elif a["type"] == "round":
            assert a["loss"] == b["loss"] and a["consensus_distance"] == b["consensus_distance"]
            assert a["network"] == b["network"]  # the record names the links used, not those scheduled
            assert all(math.isfinite(v) for v in a["loss"].values())
        else:
            keep = [k for k in a["metrics"] if not k.startswith("drift_to_neighbours")]
            assert {k: a["metrics"][k] for k in keep} == {k: b["metrics"][k] for k in keep}
            assert all(math.isfinite(v) for v in a["metrics"].values())


def test_abort_ends_the_job_naming_the_peer(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*FEDAVG, "--fault", "nan@2:2", "--on-nonfinite", "abort", "--out", str(tmp_path)])
    assert exit_.value.code == 1
    assert "non-finite message from peer 2 to peer 1 in round 2 (--on-nonfinite abort)" in capsys.readouterr().err


DIVERGING = ["--peers", "4", "--rounds", "3", "--topology", "cycle", "--dataset", "synthetic", "--train-subset", "240",
             "--batch-size", "16", "--local-steps", "2", "--eval-every", "0", "--no-progress", "--no-plots",
             "--fault", "diverge@1:1"]


@pytest.mark.parametrize(("algorithm", "batch_peers"), [("moon", "off"), ("moon", "on"), ("scaffold", "off")])
def test_a_rolled_back_update_leaves_nothing_in_the_method_records(tmp_path: Path, algorithm: str,
                                                                   batch_peers: str) -> None:
    """Peer 1's update of round 1 turns non-finite (--fault diverge@1:1) and is rolled back. What the method
    records after local training (MOON's pool of previous models, SCAFFOLD's control variate c_i) holds only
    accepted updates, so from round 2 on peer 1 trains normally: finite losses, never rolled back again, no
    message of it rejected (SCAFFOLD gossips c_i)."""
    args = [*DIVERGING, "--algorithm", algorithm, "--batch-peers", batch_peers, "--out", str(tmp_path), "--name", "d"]
    assert main(args) == 0
    rounds = [r for r in lines(tmp_path / "d") if r["type"] == "round" and r["round"]]
    assert [r["rolled_back"] for r in rounds] == [[1], [], []]
    assert math.isnan(rounds[0]["loss"]["1"])
    assert all(math.isfinite(v) for r in rounds[1:] for v in r["loss"].values())
    assert all(r["rejected"] == [] for r in rounds)
    if algorithm == "moon":  # peer 1's pool holds no model of round 1: no contrastive term in round 2, as in round 1
        assert rounds[1]["loss_con"]["1"] == 0.0 and all(rounds[1]["loss_con"][p] > 0 for p in "023")
        assert all(v > 0 for v in rounds[2]["loss_con"].values())


TRAIN = {"dataset": "synthetic", "train_subset": 240, "batch_size": 16, "local_steps": 3}


@pytest.mark.parametrize("mode", ["rollback", "abort"])
def test_a_peer_whose_update_turns_non_finite_is_rolled_back(tmp_path: Path, mode: str) -> None:
    algo = setup_algorithm(tmp_path, algorithm="fedavg", on_nonfinite=mode, **TRAIN)
    loss = algo.local_loss

    def poisoned(batch):
        value, terms = loss(batch)
        return value * (float("nan") if batch.peers[0].id == 1 else 1.0), terms
    algo.local_loss = poisoned
    before = {p: {k: v.clone() for k, v in peer.model.state_dict().items()} for p, peer in algo.peers.items()}
    if mode == "abort":
        with pytest.raises(RuntimeError, match="peer 1's update turned non-finite in round 1"):
            algo.local_update(1, 1)
        return
    rolled_back = []
    for p in algo.peers:
        update = algo.local_updates([p], 1, algo.ctx.schedule.at(1))
        metrics, rolled_back = update.metrics[p], rolled_back + update.rolled_back
        state = algo.peers[p].model.state_dict()
        if p == 1:
            assert math.isnan(metrics["loss"])
            assert all(torch.equal(state[k], before[p][k]) for k in state)  # back to its state before the round
        else:
            assert math.isfinite(metrics["loss"]) and not all(torch.equal(state[k], before[p][k]) for k in state)
    assert rolled_back == [1]


def test_batched_peers_roll_back_only_the_peer_that_turned_non_finite(tmp_path: Path) -> None:
    """--batch-peers on: one stacked optimiser step poisons peer 1's slice; that peer returns to its state
    before the round exactly, the others keep their trained models."""
    algo = setup_algorithm(tmp_path, algorithm="fedavg", batch_peers="on", peers=4, **TRAIN)
    assert algo.batched is not None
    build = algo.batched.optimizer

    def poisoning(group, stack, round):
        opt = build(group, stack, round)
        step, row = opt.step, [peer.id for peer in group].index(1)

        def poisoned_step(grads, n=None):
            step(grads, n)
            opt.params[0][row].view(-1)[0] = float("nan")
        opt.step = poisoned_step
        return opt
    algo.batched.optimizer = poisoning
    with torch.no_grad():  # distinct starts, so that restoring the wrong peer's slice shows
        for p, peer in algo.peers.items():
            for w in peer.model.parameters():
                w.add_(0.01 * p)
    before = {p: {k: v.clone() for k, v in peer.model.state_dict().items()} for p, peer in algo.peers.items()}
    update = algo.local_updates(sorted(algo.peers), 1, algo.ctx.schedule.at(1))
    metrics = update.metrics
    for p, peer in algo.peers.items():
        state = peer.model.state_dict()
        assert math.isfinite(metrics[p]["loss"]) == (p != 1)  # its later steps ran on the poisoned model
        if p == 1:
            assert all(torch.equal(state[k], before[p][k]) for k in state)
        else:
            assert not all(torch.equal(state[k], before[p][k]) for k in state)
            assert all(bool(torch.isfinite(v).all()) for v in state.values() if v.is_floating_point())
    assert update.rolled_back == [1]


def test_fedmuscle_drops_non_finite_representations(tmp_path: Path) -> None:
    args = ["--algorithm", "fedmuscle", "--peers", "4", "--rounds", "2", "--topology", "complete", "--dataset",
            "synthetic", "--train-subset", "240", "--batch-size", "16", "--local-steps", "1", "--public-size", "80",
            "--public-batch", "8", "--rep-dim", "16", "--muscle-m", "3", "--eval-every", "0", "--fault", "nan@0:1",
            "--no-progress", "--no-plots", "--out", str(tmp_path), "--name", "m"]
    assert main(args) == 0
    records = lines(tmp_path / "m")
    assert [r["rejected"] for r in records if r["type"] == "round" and r["round"]] == [[[1, 0], [2, 0], [3, 0]]] * 2
    final = records[-1]
    assert all(math.isfinite(m["task_metric"]) for m in final["per_peer"].values())
    assert all(math.isfinite(v) for v in records[-2]["muscle_loss"].values())
