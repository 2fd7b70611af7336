"""MOON's baselines, decentralised: FedAvg is the (data-size-weighted) average on complete/uniform, FedProx's
proximal term, SCAFFOLD's correction and control-variate update against their definitions, SOLO's silence."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from p2pfl.runtime.checkpoint import record_state, restore_record

from conftest import run_job
from test_moon import _comparable, a_batch, make_algorithm, one_round, records, run_inprocess, state_vector


@pytest.mark.parametrize("weight_by_data", [True, False])
def test_fedavg_round_is_the_central_average(tmp_path: Path, weight_by_data: bool) -> None:
    algo = make_algorithm(tmp_path, "fedavg", weight_by_data=weight_by_data)
    peers = algo.ctx.local_peers
    trained = one_round(algo, 1)
    sizes = torch.tensor([float(len(algo.peers[p].data)) for p in peers], dtype=torch.float64)
    assert len(set(sizes.tolist())) > 1  # the Dirichlet shards differ in size, so weighting matters
    stack = torch.stack([trained[p].double() for p in peers])
    weights = sizes / sizes.sum() if weight_by_data else torch.full_like(sizes, 1 / len(peers))
    expected = (weights[:, None] * stack).sum(0)
    other = (stack * ((1 / len(peers)) if weight_by_data else (sizes / sizes.sum())[:, None])).sum(0)
    assert float((expected - other).abs().max()) > 1e-4  # the two averages are distinguishable
    assert float((stack[0] - stack[1]).abs().max()) > 1e-4  # the peers trained different models
    for p in peers:
        torch.testing.assert_close(state_vector(algo.peers[p].model).double(), expected, rtol=0, atol=2e-7)


def test_fedprox_term_and_gradient(tmp_path: Path) -> None:
    assert make_algorithm(tmp_path, "fedprox").cfg.mu == 0.01  # its own default, not MOON's 5
    mu = 0.7
    algo = make_algorithm(tmp_path, "fedprox", mu=mu)
    x, y = a_batch(algo, 0)
    model = algo.peers[0].model.train()
    algo.before_local(algo.peers[0], 1)
    assert torch.equal(algo.loss(algo.peers[0], x, y), F.cross_entropy(model(x)[2], y))  # w = w_start: plain CE
    gen = torch.Generator().manual_seed(7)
    deltas = [0.05 * torch.randn(p.shape, generator=gen) for p in model.parameters()]
    with torch.no_grad():
        for p, d in zip(model.parameters(), deltas):
            p.add_(d)
    params = list(model.parameters())
    loss, ce = algo.loss(algo.peers[0], x, y), F.cross_entropy(model(x)[2], y)
    expected = mu / 2 * sum(float(((p.detach().double() - p0.double()) ** 2).sum())
                            for p, p0 in zip(params, algo.peers[0].start))
    assert float((loss - ce).detach()) == pytest.approx(expected, rel=1e-4)
    for g, gc, p, p0 in zip(torch.autograd.grad(loss, params), torch.autograd.grad(ce, params), params,
                            algo.peers[0].start):
        torch.testing.assert_close(g - gc, mu * (p.detach() - p0), rtol=1e-4, atol=1e-6)


def test_scaffold_control_variate_update(tmp_path: Path) -> None:
    algo = make_algorithm(tmp_path, "scaffold", local_steps=3, lr=0.03)
    one_round(algo, 1)  # afterwards c_i and c are non-zero
    peer = 2
    c_i, c = algo.peers[peer].c_local.clone().double(), algo.peers[peer].c_mix.clone().double()
    assert float(c_i.abs().max()) > 0 and float((c - c_i).abs().max()) > 0
    w_start = algo.flat_params(algo.peers[peer]).double()
    algo.local_update(peer, 2)
    w = algo.flat_params(algo.peers[peer]).double()
    expected = c_i - c + (w_start - w) / (3 * 0.03)
    torch.testing.assert_close(algo.peers[peer].c_local.double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("momentum,weight_decay", [(0.0, 0.0), (0.9, 1e-3)])
def test_scaffold_local_steps_by_hand(tmp_path: Path, momentum: float, weight_decay: float) -> None:
    """Each local step is an SGD step on the cross-entropy gradient g followed by w ← w − lr·(c − c_i); with
    plain SGD that is the step along g + c − c_i. Replayed here with a hand-written SGD (momentum, decay)."""
    lr, steps = 0.1, 3
    algo = make_algorithm(tmp_path, "scaffold", local_steps=steps, lr=lr, momentum=momentum,
                          weight_decay=weight_decay)
    one_round(algo, 1)
    peer = 1
    saved = copy.deepcopy(record_state(algo.peers[peer]))
    algo.local_update(peer, 2)
    stepped = [p.detach().clone() for p in algo.trainable(algo.peers[peer].model)]
    # the same weights, control variates, batches and augmentation as before the step
    restore_record(algo.peers[peer], copy.deepcopy(saved), algo.ctx.device)
    params = algo.trainable(algo.peers[peer].model)
    correction = [d.view_as(p) for d, p in
                  zip((algo.peers[peer].c_mix - algo.peers[peer].c_local).split([p.numel() for p in params]), params)]
    assert max(float(d.abs().max()) for d in correction) > 0
    w = [p.detach().clone() for p in params]
    bufs = None
    for _ in range(steps):
        with torch.no_grad():
            for p, wk in zip(params, w):
                p.copy_(wk)
        x, y = algo.peers[peer].data.next_batch(algo.batch_size(algo.peers[peer]))
        grads = torch.autograd.grad(algo.batch_loss(algo.peers[peer], x, y), params)
        d_p = [g + weight_decay * wk for g, wk in zip(grads, w)]
        bufs = d_p if bufs is None else [momentum * b + d for b, d in zip(bufs, d_p)]
        w = [wk - lr * b - lr * d for wk, b, d in zip(w, bufs, correction)]
    for got, want in zip(stepped, w):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_scaffold_mixes_control_variates_as_a_second_message(tmp_path: Path) -> None:
    algo = make_algorithm(tmp_path, "scaffold")
    peers = algo.ctx.local_peers
    for p in peers:
        algo.local_update(p, 1)
    controls = torch.stack([algo.peers[p].c_local.double() for p in peers])
    stats = algo.ctx.transport.stats
    sent0 = dict(stats.peer_sent)
    algo.communicate(1, algo.ctx.schedule.at(1, active=set(peers)))
    for p in peers:  # complete + uniform: the mix is the mean, i.e. SCAFFOLD's server control variate
        torch.testing.assert_close(algo.peers[p].c_mix.double(), controls.mean(0), rtol=0, atol=1e-6)
        assert not torch.equal(algo.peers[p].c_mix, algo.peers[p].c_local)  # the peer keeps its own c_i
    params = algo.peers[0].mixable.numel
    control = algo.peers[0].c_local.numel()
    deg = len(peers) - 1
    assert {p: stats.peer_sent[p] - sent0.get(p, 0) for p in peers} == {p: 4 * deg * (params + control) for p in peers}


def test_solo_never_communicates(tmp_path: Path) -> None:
    algo = make_algorithm(tmp_path, "solo")
    trained = one_round(algo, 1)
    for p in algo.ctx.local_peers:
        assert torch.equal(state_vector(algo.peers[p].model), trained[p])
    assert sum(algo.ctx.transport.stats.peer_sent.values()) == 0
    assert not torch.equal(trained[0], trained[1])


BASE = ["--dataset", "synthetic", "--peers", "4", "--topology", "complete", "--mixing", "uniform",
        "--optimizer", "sgd", "--lr", "0.05", "--batch-size", "32", "--train-subset", "512", "--alpha", "0.5",
        "--threads", "1", "--no-progress", "--no-plots"]


def test_runs_record_test_accuracy_and_traffic(tmp_path: Path) -> None:
    traffic = {}
    for algorithm in ("fedavg", "fedprox", "scaffold", "solo"):
        run_inprocess(["--algorithm", algorithm, *BASE, "--rounds", "2", "--out", str(tmp_path), "--name", algorithm])
        recs = records(tmp_path / algorithm)
        final = [r for r in recs if r["type"] == "eval"][-1]
        assert 0.0 <= final["metrics"]["test_acc_avg"] <= 1.0
        assert set(final["per_peer"]) == {"0", "1", "2", "3"}
        assert all("test_acc" in m for m in final["per_peer"].values())
        traffic[algorithm] = [r["bytes_sent"] for r in recs if r["type"] == "round" and r["round"] > 0]
    assert traffic["solo"] == [0, 0]
    assert traffic["fedprox"] == traffic["fedavg"]
    assert traffic["scaffold"] == [2 * b for b in traffic["fedavg"]]  # model + control variate, same size


def test_scaffold_resumes_from_a_checkpoint(tmp_path: Path) -> None:
    args = ["--algorithm", "scaffold", *BASE, "--checkpoint-every", "1", "--out", str(tmp_path)]
    run_inprocess([*args, "--rounds", "3", "--name", "full"])
    run_inprocess([*args, "--rounds", "2", "--name", "cut"])
    run_inprocess([*args, "--rounds", "3", "--resume", str(tmp_path / "cut")])

    def round3(name):
        return [_comparable(r) for r in records(tmp_path / name) if r["round"] == 3]
    assert round3("cut") == round3("full")


@pytest.mark.mpi
def test_scaffold_under_mpirun_matches_one_process(tmp_path: Path) -> None:
    args = ["-m", "p2pfl.run", "--algorithm", "scaffold", *BASE, "--rounds", "2", "--out", str(tmp_path)]
    proc = run_job([*args, "--name", "mpi"], ranks=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_inprocess([*args[2:], "--name", "one"])
    assert [_comparable(r) for r in records(tmp_path / "mpi")] == [_comparable(r) for r in records(tmp_path / "one")]
