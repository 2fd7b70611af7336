"""The final evaluation scores each distinct model once (p2pfl.algorithms.distinct): identical models found
bitwise, scored once, their scores reported for every peer holding them; the records as when every model is
scored; --eval-peers 0 scores the network average alone; the manifest and summary say what was scored.

The expectations are independent of the digests: which models are identical is found here by comparing every
pair of state dicts with torch.equal, and the scores reported are compared with each model scored on its own."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from p2pfl.algorithms.distinct import plan_scoring, scoring_record, state_digest

from conftest import one_and_two_ranks_agree, run_job
from helpers_inproc import setup_algorithm

SMALL = {"peers": 5, "partition": "dirichlet", "local_steps": 2, "batch_size": 16, "train_subset": 400,
         "probe_epochs": 2, "knn_k": 20, "batch_peers": "off"}
SERVER = {"topology": "star", "mixing": "server"}


def _round(algo, t: int = 1) -> None:
    net = algo.ctx.schedule.at(t)
    algo.local_updates(sorted(algo.peers), t, net)
    algo.communicate(t, net)


def _same(a: nn.Module, b: nn.Module) -> bool:
    """Every parameter and buffer equal, value and dtype (the reference for the digests)."""
    sa, sb = a.state_dict(keep_vars=True), b.state_dict(keep_vars=True)
    return sa.keys() == sb.keys() and all(sa[k].dtype == sb[k].dtype and torch.equal(sa[k], sb[k]) for k in sa)


def _counting(algo) -> list:
    """Every call of the method's scoring: ("score", peer) and ("stacked", peers)."""
    calls: list = []
    score, stacked = algo.score, algo.score_stacked
    algo.score = lambda model, peer, final: calls.append(("score", peer)) or score(model, peer, final)
    algo.score_stacked = lambda s, st, peers, final: calls.append(("stacked", tuple(peers))) or stacked(s, st, peers,
                                                                                                         final)
    return calls


def _untrained(algo) -> int:
    """1 when the evaluation also scores the untrained encoder (the representation methods' baseline), else 0."""
    return int(algo.scores_representations)


def _expected_models(algo, net) -> int:
    """The models a final evaluation must score, by brute force: the network average, and one model of each
    group of identical peer models unlike it."""
    avg = algo.average_model(net)
    groups: list[nn.Module] = []
    for p in sorted(algo.peers):
        model = algo.peers[p].model
        if not _same(model, avg) and not any(_same(model, g) for g in groups):
            groups.append(model)
    return 1 + len(groups)


def test_plan_scores_each_digest_once() -> None:
    digests = {4: b"a", 0: b"b", 2: b"a", 7: b"c", 3: b"b", 5: b"z"}
    plan = plan_scoring(digests, known=[b"z", b"c", b"z"])
    assert plan.scorers == [0, 2]
    assert plan.source == {0: 0, 3: 0, 2: 2, 4: 2}
    assert plan.known == {5: 0, 7: 1}
    record = scoring_record([(2, [b"a", b"b", b"c"]), (0, [b"a", b"b", b"z"])], known=[b"z"])
    assert record == {"models_scored": 3, "peers_scored": 6, "peer_models_distinct": 4, "peers_holding_average": 1,
                      "by_digest": True}


def test_digest_sees_every_bit_of_parameters_and_buffers() -> None:
    torch.manual_seed(0)
    a = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    b = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    b.load_state_dict(a.state_dict())
    assert state_digest(a) == state_digest(b)
    with torch.no_grad():
        b[0].weight[1, 2] = torch.nextafter(b[0].weight[1, 2], torch.tensor(1.0))  # one ulp
    assert state_digest(a) != state_digest(b)
    b.load_state_dict(a.state_dict())
    b[1].running_var[0] += 1e-7  # a buffer the scoring pass reads in eval mode
    assert state_digest(a) != state_digest(b)
    b.load_state_dict(a.state_dict())
    b[1].num_batches_tracked += 1
    assert state_digest(a) != state_digest(b)
    b.load_state_dict(a.state_dict())
    assert state_digest(a) != state_digest(b.double())  # the same values in another dtype


@pytest.mark.parametrize("algorithm", ["fedavg", "dec-sl"])
def test_identical_models_are_scored_once(tmp_path: Path, algorithm: str) -> None:
    """After a server round every peer holds the network average: the final evaluation calls the scoring once
    (the average) and reports its scores, as each peer's model scored alone gives them, for every peer."""
    algo = setup_algorithm(tmp_path / "run", algorithm=algorithm, **SERVER, **SMALL)
    _round(algo)
    net = algo.ctx.schedule.at(1)
    assert _expected_models(algo, net) == 1
    calls = _counting(algo)
    metrics, per_peer = algo.evaluate(1, final=True, net=net)
    assert calls == [("score", None)] * (1 + _untrained(algo))
    assert sorted(per_peer) == sorted(algo.peers) and metrics["peers_scored"] == 5
    for p, peer in algo.peers.items():
        own = algo.score(peer.model.eval(), p, True)  # the model scored alone (and not counted above)
        assert {k: per_peer[p][k] for k in own} == own and set(per_peer[p]) - set(own) == {"drift_to_avg",
                                                                                          "drift_to_neighbours"}
    assert algo.summary()["scoring"] == {"models_scored": 1, "peers_scored": 5, "peer_models_distinct": 1,
                                         "peers_holding_average": 5, "by_digest": True}


@pytest.mark.parametrize("batch_peers", ["off", "on"])
def test_groups_are_scored_once_each_and_the_records_are_as_before(tmp_path: Path, batch_peers: str) -> None:
    """Dec-SL on a ring, then peers 1 and 3 given peer 0's model: one scoring of the average, one of peer 0's
    group, one each of peers 2 and 4 (as the brute-force count says), and the evaluation's records equal, bit for
    bit, to those of the same evaluation scoring every peer's model (`scores_by_model` False); peer-stacked
    scoring (--batch-peers on) then stacks fewer models, with the same scores."""
    algo = setup_algorithm(tmp_path / "run", algorithm="dec-sl", topology="cycle", **{**SMALL,
                                                                                       "batch_peers": batch_peers})
    _round(algo)
    net = algo.ctx.schedule.at(1)
    for p in (1, 3):
        algo.peers[p].model.load_state_dict(algo.peers[0].model.state_dict())
    assert _expected_models(algo, net) == 4
    calls = _counting(algo)
    metrics, per_peer = algo.evaluate(1, final=True, net=net)
    scored_peers = [p for kind, who in calls for p in ((who,) if kind == "score" else who)]
    assert sorted(scored_peers, key=lambda p: -1 if p is None else p) == [None] * (1 + _untrained(algo)) + [0, 2, 4]
    assert algo.summary()["scoring"] == {"models_scored": 4, "peers_scored": 5, "peer_models_distinct": 3,
                                         "peers_holding_average": 0, "by_digest": True}
    algo.scores_by_model = False
    calls.clear()
    every_metrics, every_per_peer = algo.evaluate(1, final=True, net=net)
    scorings = len([c for c in calls if c[0] == "score"]) + sum(len(c[1]) for c in calls if c[0] == "stacked")
    assert scorings == 1 + 5  # the average and every peer (the untrained encoder's scores are kept from above)
    assert json.dumps(metrics) == json.dumps(every_metrics)
    assert json.dumps(per_peer) == json.dumps(every_per_peer)


def test_eval_peers_zero_scores_the_average_alone(tmp_path: Path) -> None:
    algo = setup_algorithm(tmp_path / "run", algorithm="dec-sl", topology="cycle", eval_peers=0, **SMALL)
    _round(algo)
    calls = _counting(algo)
    metrics, per_peer = algo.evaluate(1, final=True, net=algo.ctx.schedule.at(1))
    assert calls == [("score", None)] * (1 + _untrained(algo)) and per_peer == {}
    assert metrics["peers_scored"] == 0 and {"test_acc_avg", "knn_acc_avg", "probe_acc_avg"} <= metrics.keys()
    assert not any(k.endswith("_peer_mean") for k in metrics)


def _cli(runs: Path, *extra: str) -> list[str]:
    return ["-m", "p2pfl.run", "--algorithm", "fedavg", "--dataset", "synthetic", "--peers", "4", "--rounds", "2",
            "--local-steps", "2", "--batch-size", "16", "--train-subset", "256", "--eval-every", "1", "--threads", "1",
            "--batch-peers", "off", "--no-progress", "--no-plots", "--out", str(runs), *extra]


@pytest.mark.mpi
def test_server_run_records_what_it_scored_on_one_and_two_ranks(runs_dir: Path) -> None:
    """A server FedAvg run: the same records bit for bit on 1 and 2 ranks; each says it scored one model for
    its 4 peers (the root's average, and on 2 ranks the second rank's copy of it once more)."""
    one, two = one_and_two_ranks_agree(_cli(runs_dir, "--topology", "star", "--mixing", "server"), runs_dir)
    assert one["scoring"] == {"models_scored": 1, "peers_scored": 4, "peer_models_distinct": 1,
                              "peers_holding_average": 4, "by_digest": True}
    assert two["scoring"] == {**one["scoring"], "models_scored": 2}
    summary = json.loads((runs_dir / "one" / "summary.json").read_text())
    assert summary["scoring"] == one["scoring"]
    evals = [json.loads(line) for line in (runs_dir / "one" / "metrics.jsonl").read_text().splitlines()]
    zeta2 = {r["round"]: "zeta2_avg" in r["metrics"] for r in evals if r["type"] == "eval"}
    assert zeta2 == {1: False, 2: True}  # --zeta2-batch unset: the final evaluation only


def test_eval_peers_must_not_be_negative(runs_dir: Path) -> None:
    proc = run_job(_cli(runs_dir, "--eval-peers", "-1"), ranks=0)
    assert proc.returncode != 0 and "--eval-peers" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
