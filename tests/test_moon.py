"""MOON, decentralised: the local loss against a float64 computation, the previous-model pool (trained, not
mixed; kept under partial participation and across a checkpoint), and a run under mpirun."""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from p2pfl.data import supervised_augment
from p2pfl.losses import moon_contrastive
from p2pfl.models import MixableState
from p2pfl.run import main

from conftest import run_job
from helpers_inproc import setup_algorithm

# A small, fast setting on the synthetic dataset; tests override what they check.
FAST = {"dataset": "synthetic", "peers": 4, "topology": "complete", "mixing": "uniform", "optimizer": "sgd",
        "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-5, "batch_size": 32, "local_steps": 2,
        "train_subset": 512, "partition": "dirichlet", "alpha": 0.5, "threads": 1, "progress": False,
        "plots": False}


def make_algorithm(tmp_path: Path, algorithm: str, **options):
    """`algorithm` set up in this process in the FAST setting (overridden by `options`)."""
    return setup_algorithm(tmp_path, algorithm=algorithm, **{**FAST, **options})


def state_vector(model: torch.nn.Module) -> torch.Tensor:
    """The model's whole floating state as one vector (a copy)."""
    return MixableState(model).flatten().clone()


def a_batch(algo, peer: int, n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """An augmented, normalised batch of the peer's own images (drawn from a private generator)."""
    data = algo.peers[peer].data
    x, y = data.x[:n], data.y[:n]
    gen = torch.Generator().manual_seed(1234)
    ds = algo.dataset
    return supervised_augment(x, gen, ds.mean, ds.std), y


def one_round(algo, round: int, active: set[int] | None = None) -> dict[int, torch.Tensor]:
    """Train the active peers and mix; returns each trained peer's pre-mix state."""
    active = set(algo.ctx.local_peers) if active is None else active
    trained = {}
    for p in sorted(active):
        algo.local_update(p, round)
        trained[p] = state_vector(algo.peers[p].model)
    algo.communicate(round, algo.ctx.schedule.at(round, active=active))
    return trained


def run_inprocess(args: list[str]) -> None:
    """`python -m p2pfl.run ARGS` in this process (one rank)."""
    assert main(args) == 0


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


# ---------------------------------------------------------------------------------------------- the loss

def _reference_loss(algo, peer: int, x: torch.Tensor, y: torch.Tensor) -> float:
    """CE + mu·ℓ_con computed in float64 from copies of the three kinds of model, cosines written out."""
    def dbl(model):
        return copy.deepcopy(model).double().eval()
    model = dbl(algo.peers[peer].model).train()
    xd = x.double()
    _, z, logits = model(xd)
    ce = F.cross_entropy(logits, y)
    z_glob = dbl(algo.peers[peer].glob)(xd)[1]
    z_prev = [dbl(ref)(xd)[1] for ref in algo.peers[peer].pool]

    def cos(a, b):
        return (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1))
    tau = algo.cfg.temperature
    pos = torch.exp(cos(z, z_glob) / tau)
    neg = sum(torch.exp(cos(z, zp) / tau) for zp in z_prev)
    con = (-torch.log(pos / (pos + neg))).mean()
    return float((ce + algo.cfg.mu * con).detach())


def test_round_one_is_plain_cross_entropy(tmp_path: Path) -> None:
    algo = make_algorithm(tmp_path, "moon")
    x, y = a_batch(algo, 0)
    algo.before_local(algo.peers[0], 1)
    assert len(algo.peers[0].pool) == 0
    loss = algo.loss(algo.peers[0], x, y)
    assert torch.equal(loss, F.cross_entropy(algo.peers[0].model(x)[2], y))


@pytest.mark.parametrize("prev_models", [1, 2])
def test_loss_matches_float64_computation(tmp_path: Path, prev_models: int) -> None:
    algo = make_algorithm(tmp_path, "moon", prev_models=prev_models, mu=2.5, temperature=0.3)
    for t in (1, 2, 3):
        one_round(algo, t)
    assert len(algo.peers[1].pool) == prev_models
    algo.before_local(algo.peers[1], 4)  # the round-4 start model (the mix) becomes z_glob's source
    x, y = a_batch(algo, 1)
    algo.peers[1].model.train()
    got = float(algo.loss(algo.peers[1], x, y).detach())
    assert got == pytest.approx(_reference_loss(algo, 1, x, y), rel=2e-6, abs=1e-6)
    ce = float(F.cross_entropy(algo.peers[1].model(x)[2], y).detach())
    assert got > ce  # the contrastive term is really there


def test_glob_equal_to_prev_gives_log2_and_no_gradient(tmp_path: Path) -> None:
    algo = make_algorithm(tmp_path, "moon", mu=5.0)
    one_round(algo, 1)
    algo.before_local(algo.peers[0], 2)
    algo.peers[0].pool[0].load_state_dict(algo.peers[0].glob.state_dict())  # z_prev = z_glob
    x, y = a_batch(algo, 0)
    model = algo.peers[0].model.train()
    _, z, logits = model(x)
    with torch.no_grad():
        refs = [ref(x)[1] for ref in algo.references(algo.peers[0])]  # z_glob, then the pool's z_prev
    con = moon_contrastive(z, refs[0], refs[1:], temperature=algo.cfg.temperature)
    assert float(con.detach()) == pytest.approx(math.log(2), abs=1e-6)
    params = [p for p in model.parameters()]
    grads = torch.autograd.grad(con, params, allow_unused=True)
    assert all(g is None or float(g.abs().max()) < 1e-7 for g in grads)
    # hence the full loss's gradient is the cross-entropy's
    loss_grads = torch.autograd.grad(algo.loss(algo.peers[0], x, y), params)
    ce_grads = torch.autograd.grad(F.cross_entropy(model(x)[2], y), params)
    for a, b in zip(loss_grads, ce_grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------------------------------------- the pool

def test_previous_model_is_the_trained_one_not_the_mix(tmp_path: Path) -> None:
    algo = make_algorithm(tmp_path, "moon")
    trained = one_round(algo, 1)
    for p in algo.ctx.local_peers:
        mixed = state_vector(algo.peers[p].model)
        assert not torch.equal(mixed, trained[p])  # mixing changed the model ...
        assert torch.equal(state_vector(algo.peers[p].pool[0]), trained[p])  # ... but z_prev's model is the trained one
        prev = algo.peers[p].pool[0]
        assert not prev.training and not any(q.requires_grad for q in prev.parameters())
        algo.before_local(algo.peers[p], 2)
        assert torch.equal(state_vector(algo.peers[p].glob), mixed)  # z_glob's model is the round's start (the mix)
        assert not algo.peers[p].glob.training


def test_pool_only_moves_when_the_peer_trains(tmp_path: Path) -> None:
    algo = make_algorithm(tmp_path, "moon", prev_models=2)
    first = one_round(algo, 1)
    second = one_round(algo, 2, active={0, 1})  # peers 2 and 3 sit round 2 out
    for p in (0, 1):
        pool = algo.peers[p].pool
        assert [torch.equal(state_vector(r), v) for r, v in zip(pool, (first[p], second[p]))] == [True, True]
    for p in (2, 3):
        assert len(algo.peers[p].pool) == 1 and torch.equal(state_vector(algo.peers[p].pool[0]), first[p])
    third = one_round(algo, 3)  # FIFO of 2: the oldest drops out
    for p in (0, 1):
        assert torch.equal(state_vector(algo.peers[p].pool[0]), second[p])
        assert torch.equal(state_vector(algo.peers[p].pool[1]), third[p])


def test_default_and_explicit_mu(tmp_path: Path) -> None:
    assert make_algorithm(tmp_path, "moon").cfg.mu == 5.0
    assert make_algorithm(tmp_path, "moon", mu=1.0).cfg.mu == 1.0


RUN = ["--algorithm", "moon", "--dataset", "synthetic", "--peers", "4", "--topology", "complete",
       "--mixing", "uniform", "--optimizer", "sgd", "--lr", "0.05", "--batch-size", "32", "--train-subset", "512",
       "--alpha", "0.5", "--threads", "1", "--no-progress", "--no-plots",
       "--batch-peers", "off"]  # compared bit for bit across layouts: peer by peer


def _comparable(record: dict) -> dict:
    """A metrics record without its clock readings."""
    return {k: v for k, v in record.items() if not k.startswith("time_") and not k.endswith("_s")}


def test_resume_after_checkpoint_matches_uninterrupted_run(tmp_path: Path) -> None:
    out = str(tmp_path)
    run_inprocess([*RUN, "--rounds", "3", "--checkpoint-every", "1", "--out", out, "--name", "full"])
    run_inprocess([*RUN, "--rounds", "2", "--checkpoint-every", "1", "--out", out, "--name", "cut"])
    run_inprocess([*RUN, "--rounds", "3", "--checkpoint-every", "1", "--out", out, "--resume", str(tmp_path / "cut")])
    full, resumed = records(tmp_path / "full"), records(tmp_path / "cut")

    def last(recs, kind):
        return [r for r in recs if r["type"] == kind and r["round"] == 3][-1]
    assert last(full, "round")["loss_con_mean"] > 0  # round 3 really used previous models
    assert _comparable(last(resumed, "round")) == _comparable(last(full, "round"))  # bitwise
    assert last(resumed, "eval")["metrics"] == last(full, "eval")["metrics"]
    assert last(resumed, "eval")["per_peer"] == last(full, "eval")["per_peer"]


@pytest.mark.mpi
def test_run_under_mpirun_writes_all_files_and_matches_one_process(tmp_path: Path) -> None:
    with_plots = [a for a in RUN if a != "--no-plots"]
    proc = run_job(["-m", "p2pfl.run", *with_plots, "--rounds", "2", "--out", str(tmp_path), "--name", "mpi"], ranks=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / "mpi"
    for name in ("config.yaml", "manifest.json", "metrics.jsonl", "summary.json"):
        assert (run_dir / name).is_file(), name
    assert list((run_dir / "plots").glob("*.png"))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert [h["peers"] for h in manifest["hosts"]] == [[0, 1], [2, 3]]
    assert manifest["config"]["mu"] == 5.0  # RUN leaves mu, momentum, weight decay and tau to MOON's defaults
    assert manifest["method_defaults"] == {"momentum": 0.9, "weight_decay": 1e-5, "mu": 5.0, "temperature": 0.5}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert 0.0 <= summary["final"]["test_acc_avg"] <= 1.0
    assert set(next(r for r in records(run_dir) if r["type"] == "eval")["per_peer"]) == {"0", "1", "2", "3"}
    # the same job in one process gives the same numbers, bitwise
    run_inprocess([*RUN, "--rounds", "2", "--out", str(tmp_path), "--name", "one"])
    rounds = {name: [_comparable(r) for r in records(tmp_path / name) if r["type"] == "round"]
              for name in ("mpi", "one")}
    assert len(rounds["mpi"]) == 3 and rounds["mpi"] == rounds["one"]



def test_moon_learns_the_synthetic_task(tmp_path: Path) -> None:
    args = [a for a in RUN]
    del args[args.index("--train-subset"):args.index("--train-subset") + 2]  # all 2000 images
    run_inprocess([*args, "--rounds", "6", "--out", str(tmp_path), "--name", "learn"])
    recs = records(tmp_path / "learn")
    final = [r for r in recs if r["type"] == "eval"][-1]
    assert final["metrics"]["test_acc_avg"] > 0.2  # chance is 0.1
    losses = [r["loss_mean"] for r in recs if r["type"] == "round" and r["round"] > 1]
    assert losses[-1] < losses[0]
