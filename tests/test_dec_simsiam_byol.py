"""Dec-SSL with SimSiam and BYOL: the losses against direct float64 loops, the stop-gradients, the networks,
BYOL's local momentum target (never mixed, its EMA in closed form, exact resume), --batch-peers, and short
runs on 4 ranks equal to 1 rank bit for bit."""
from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from p2pfl.algorithms.dec_byol import byol_tau
from p2pfl.config import ConfigError, make_config, resolve
from p2pfl.losses.siamese import byol_loss, simsiam_loss
from p2pfl.models.siamese import BYOLNet, SimSiamNet
from p2pfl.runtime.checkpoint import record_state, restore_record

from conftest import four_ranks_equal_one
from helpers_inproc import setup_algorithm, world


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b) / (math.sqrt(float(a @ a)) * math.sqrt(float(b @ b)))


def _simsiam_loops(p1, p2, z1, z2) -> float:
    n = len(p1)
    d12 = -sum(_cos(p1[i], z2[i]) for i in range(n)) / n
    d21 = -sum(_cos(p2[i], z1[i]) for i in range(n)) / n
    return 0.5 * d12 + 0.5 * d21


def _byol_loops(p1, p2, t1, t2) -> float:
    n = len(p1)
    return (sum(2 - 2 * _cos(p1[i], t2[i]) for i in range(n)) / n
            + sum(2 - 2 * _cos(p2[i], t1[i]) for i in range(n)) / n)


def _four(seed: int, b: int, d: int, dtype=torch.float64) -> list[torch.Tensor]:
    g = _gen(seed)
    return [torch.randn(b, d, generator=g, dtype=dtype) for _ in range(4)]


# ---------------------------------------------------------------------------------------------- the losses
@pytest.mark.parametrize("seed,b,d", [(0, 4, 3), (1, 9, 16), (2, 2, 5)])
def test_simsiam_loss_matches_loops(seed: int, b: int, d: int) -> None:
    p1, p2, z1, z2 = _four(seed, b, d)
    want = _simsiam_loops(*(t.numpy() for t in (p1, p2, z1, z2)))
    assert simsiam_loss(p1, p2, z1, z2).item() == pytest.approx(want, rel=1e-12, abs=1e-14)
    assert simsiam_loss(*(t.float() for t in (p1, p2, z1, z2))).item() == pytest.approx(want, abs=1e-6)
    assert simsiam_loss(p1, p2, p2, p1).item() == pytest.approx(-1.0)  # perfect agreement: -1 (D = -cos)


@pytest.mark.parametrize("seed,b,d", [(3, 4, 3), (4, 9, 16), (5, 2, 5)])
def test_byol_loss_matches_loops(seed: int, b: int, d: int) -> None:
    p1, p2, t1, t2 = _four(seed, b, d)
    want = _byol_loops(*(t.numpy() for t in (p1, p2, t1, t2)))
    assert byol_loss(p1, p2, t1, t2).item() == pytest.approx(want, rel=1e-12)
    assert byol_loss(*(t.float() for t in (p1, p2, t1, t2))).item() == pytest.approx(want, rel=1e-6)
    assert byol_loss(p1, p2, 3 * p2, 0.5 * p1).item() == pytest.approx(0.0, abs=1e-12)


def test_losses_reject_mismatched_shapes() -> None:
    p1, p2, z1, z2 = _four(6, 4, 3)
    with pytest.raises(ValueError):
        simsiam_loss(p1, p2, z1, z2[:3])
    with pytest.raises(ValueError):
        byol_loss(p1, p2, z1[:, :2], z2)


# ---------------------------------------------------------------------------------------------- stop-gradients
@pytest.mark.parametrize("loss", [simsiam_loss, byol_loss])
def test_no_gradient_reaches_the_stopped_side(loss) -> None:
    p1, p2, z1, z2 = (t.requires_grad_() for t in _four(7, 5, 4))
    value = loss(p1, p2, z1, z2)
    gp1, gp2, gz1, gz2 = torch.autograd.grad(value, [p1, p2, z1, z2], allow_unused=True)
    assert gz1 is None and gz2 is None
    assert gp1.abs().sum() > 0 and gp2.abs().sum() > 0


class _TinyEncoder(nn.Module):
    def __init__(self, feat_dim: int = 6) -> None:
        super().__init__()
        self.feat_dim = feat_dim
        self.fc = nn.Linear(5, feat_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


def test_simsiam_projector_learns_only_through_the_predictor() -> None:
    torch.manual_seed(0)
    net = SimSiamNet(_TinyEncoder(), proj_dim=8).train()
    x = torch.randn(2 * 6, 5, generator=_gen(8))
    proj = list(net.projector.parameters())

    def project(v):  # z of each view, as SimSiamNet runs them
        return net.projector(net.encoder(v))

    z1, z2 = project(x[:6]), project(x[6:])
    # The whole loss: the projector does get a gradient (through p = predictor(z)).
    full = simsiam_loss(net.predictor(z1), net.predictor(z2), z1, z2)
    assert all(g is not None and g.abs().sum() > 0 for g in torch.autograd.grad(full, proj, retain_graph=True))
    # With the predictor path cut, nothing is left: the z arguments carry no gradient.
    cut = simsiam_loss(net.predictor(z1.detach()), net.predictor(z2.detach()), z1, z2)
    assert all(g is None for g in torch.autograd.grad(cut, proj, allow_unused=True, retain_graph=True))
    # Control: without the stop-gradient the same cut loss would reach the projector.
    p1, p2 = net.predictor(z1.detach()), net.predictor(z2.detach())
    no_sg = -0.5 * (nn.functional.cosine_similarity(p1, z2).mean() + nn.functional.cosine_similarity(p2, z1).mean())
    assert any(g is not None and g.abs().sum() > 0 for g in torch.autograd.grad(no_sg, proj, allow_unused=True))


# ---------------------------------------------------------------------------------------------- the networks
@pytest.mark.parametrize("net_cls", [SimSiamNet, BYOLNet])
def test_views_run_as_separate_batches(net_cls) -> None:
    torch.manual_seed(1)
    net = net_cls(_TinyEncoder(), proj_dim=8).train()
    x = torch.randn(10, 5, generator=_gen(9))
    z, p = net(x)
    net.views = 1  # one view: the batch as given
    z1, p1 = net(x[:5])
    z2, p2 = net(x[5:])
    assert torch.allclose(z, torch.cat([z1, z2]), atol=1e-6) and torch.allclose(p, torch.cat([p1, p2]), atol=1e-6)
    zj = net.projector(net.encoder(x))  # both views in one BatchNorm batch: different statistics
    assert not torch.allclose(z, zj, atol=1e-4)
    assert torch.equal(net.features(x), net.encoder(x))


def test_widths_scale_with_the_encoder() -> None:
    net = SimSiamNet(_TinyEncoder(feat_dim=32), proj_dim=64)
    linears = [m for m in net.projector.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(32, 128), (128, 128), (128, 64)]
    last_bn = [m for m in net.projector.modules() if isinstance(m, nn.BatchNorm1d)][-1]
    assert not last_bn.affine and last_bn.num_features == 64
    pred = [m for m in net.predictor.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in pred] == [(64, 16), (16, 64)]  # bottleneck
    byol = BYOLNet(_TinyEncoder(feat_dim=32), proj_dim=16)
    assert [m.out_features for m in byol.projector.modules() if isinstance(m, nn.Linear)] == [64, 16]
    target = byol.target()
    assert [n for n, _ in target.named_parameters()] == [n for n, _ in byol.named_parameters()
                                                         if not n.startswith("predictor.")]
    assert not any(t.requires_grad for t in target.parameters())


def test_byol_tau_schedule() -> None:
    assert byol_tau(0.99, 0, 100) == pytest.approx(0.99)
    assert byol_tau(0.99, 50, 100) == pytest.approx(0.995)
    assert byol_tau(0.99, 100, 100) == pytest.approx(1.0)
    assert byol_tau(0.9, 25, 100) == pytest.approx(1 - 0.1 * (math.cos(math.pi / 4) + 1) / 2)


# ---------------------------------------------------------------------------------------------- in the runtime
def _fill(module: nn.Module, seed: int) -> None:
    gen = _gen(seed)
    with torch.no_grad():
        for t in module.parameters():
            t.copy_(torch.rand(t.shape, generator=gen) + 0.5)


def _state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_simsiam_mixes_the_whole_model(tmp_path: Path) -> None:
    algo = setup_algorithm(tmp_path, algorithm="dec-simsiam")
    assert algo.cfg.optimizer == "sgd" and algo.cfg.lr == 0.03 and algo.cfg.weight_decay == 5e-4
    peer = algo.peers[0]
    names = set(peer.mixable.names)
    assert names == {n for n, _ in peer.model.named_parameters()} | {
        n for n, b in peer.model.named_buffers() if b.is_floating_point()}
    assert {n.split(".")[0] for n in names} == {"encoder", "projector", "predictor"}


def test_byol_target_is_never_mixed(tmp_path: Path) -> None:
    algo = setup_algorithm(tmp_path, algorithm="dec-byol", topology="cycle")
    for p, peer in algo.peers.items():
        _fill(peer.model, 100 + p)
        _fill(peer.target, 200 + p)
    online = {p: _state(peer.model) for p, peer in algo.peers.items()}
    targets = {p: _state(peer.target) for p, peer in algo.peers.items()}
    assert not any(n.startswith("target") for n in algo.peers[0].mixable.names)
    algo.communicate(1, algo.ctx.schedule.at(1, active=set(range(4))))
    for p, peer in algo.peers.items():
        for name, value in peer.target.state_dict().items():
            assert torch.equal(value, targets[p][name]), name
        for name, value in peer.model.named_parameters():  # the online network was mixed, all of it
            assert not torch.equal(value, online[p][name]), name


@pytest.mark.parametrize("k", [0, 3])
def test_byol_target_follows_its_own_online_network(tmp_path: Path, k: int) -> None:
    algo = setup_algorithm(tmp_path, algorithm="dec-byol", rounds=4, local_steps=1, batch_size=16, byol_tau=0.7)
    # The target starts as the common initialisation of the online encoder + projector.
    first = algo.peers[0]
    online0 = dict(first.model.named_parameters())
    assert all(torch.equal(t, online0[n]) for n, t in first.target.named_parameters())
    for p, peer in algo.peers.items():
        _fill(peer.target, 300 + p)  # far from the online network, so the EMA weight shows
        peer.steps_done = k
    old = {p: _state(peer.target) for p, peer in algo.peers.items()}
    algo.local_updates(sorted(algo.peers), 1, algo.ctx.schedule.at(1))
    tau, next_tau = (1 - 0.3 * (math.cos(math.pi * j / 4) + 1) / 2 for j in (k, k + 1))  # K = 4 rounds x 1 step
    for p, peer in algo.peers.items():
        assert peer.steps_done == k + 1
        theta = dict(peer.model.named_parameters())
        for name, xi in peer.target.named_parameters():
            want = tau * old[p][name].double() + (1 - tau) * theta[name].detach().double()
            assert torch.allclose(xi.double(), want, rtol=0, atol=1e-6), name
            wrong = next_tau * old[p][name].double() + (1 - next_tau) * theta[name].detach().double()
            assert not torch.allclose(xi.double(), wrong, rtol=0, atol=1e-3), name


def test_byol_rollback_restores_the_target(tmp_path: Path) -> None:
    algo = setup_algorithm(tmp_path, algorithm="dec-byol", local_steps=2, batch_size=16)
    peer = algo.peers[1]
    target, model = _state(peer.target), _state(peer.model)
    criterion = algo.criterion
    algo.criterion = lambda out, y, refs: (criterion(out, y, refs)[0] * float("nan"), {})
    update = algo.local_updates([1], 1, algo.ctx.schedule.at(1))
    assert update.rolled_back == [1] and peer.steps_done == 0
    assert all(torch.equal(v, target[n]) for n, v in peer.target.state_dict().items())
    assert all(torch.equal(v, model[n]) for n, v in peer.model.state_dict().items())


def _drive(algo, rounds: range) -> None:
    for t in rounds:
        net = algo.ctx.schedule.at(t)
        algo.rejoin(t, net)
        algo.local_updates([p for p in algo.ctx.local_peers if p in net.active], t, net)
        algo.communicate(t, net)


def test_byol_resume_keeps_the_target_exactly(tmp_path: Path) -> None:
    opts = dict(algorithm="dec-byol", rounds=3, local_steps=2, batch_size=16, keep_optimizer=True)
    ran = setup_algorithm(tmp_path / "a", **opts)
    _drive(ran, range(1, 3))
    saved = {}
    for p, peer in ran.peers.items():
        buf = io.BytesIO()
        torch.save(record_state(peer), buf)
        saved[p] = torch.load(io.BytesIO(buf.getvalue()), weights_only=True)
    resumed = setup_algorithm(tmp_path / "b", **opts)
    for p, peer in resumed.peers.items():
        restore_record(peer, saved[p], resumed.ctx.device)
        assert peer.steps_done == 4
        for name, value in peer.target.state_dict().items():
            assert torch.equal(value, ran.peers[p].target.state_dict()[name]), name
    _drive(ran, range(3, 4))
    _drive(resumed, range(3, 4))
    for p in ran.peers:
        a, b = ran.peers[p], resumed.peers[p]
        assert a.steps_done == b.steps_done == 6
        for what in ("target", "model"):
            sa, sb = getattr(a, what).state_dict(), getattr(b, what).state_dict()
            assert all(torch.equal(sa[n], sb[n]) for n in sa), what
        online = dict(a.model.named_parameters())
        assert not all(torch.equal(t, online[n]) for n, t in a.target.named_parameters())


@pytest.mark.parametrize("algorithm", ["dec-simsiam", "dec-byol"])
def test_batch_peers_auto_trains_peer_by_peer_and_on_is_refused(tmp_path: Path, algorithm: str) -> None:
    cfg = make_config(algorithm=algorithm, dataset="synthetic", peers=4, batch_peers="on", out=str(tmp_path))
    with pytest.raises(ConfigError, match="batch-peers"):
        resolve(cfg, world().size)
    algo = setup_algorithm(tmp_path, algorithm=algorithm, batch_peers="auto")
    assert algo.batched is None


# ---------------------------------------------------------------------------------------------- 4 ranks = 1 rank
SHORT = ["-m", "p2pfl.run", "--dataset", "synthetic", "--peers", "4", "--topology", "cycle", "--rounds", "2",
         "--local-steps", "2", "--batch-size", "16", "--probe-epochs", "2", "--knn-k", "10", "--no-progress",
         "--no-plots", "--partition", "dirichlet", "--alpha", "0.5", "--eval-every", "1", "--batch-peers", "off"]



@pytest.mark.mpi
@pytest.mark.parametrize("algorithm", ["dec-simsiam", "dec-byol"])
def test_short_run_on_4_ranks_matches_1_rank(runs_dir: Path, algorithm: str) -> None:
    four = four_ranks_equal_one([*SHORT, "--algorithm", algorithm], runs_dir)
    rounds = [r for r in four if r["type"] == "round" and r["round"] > 0]
    assert len(rounds) == 2 and all(math.isfinite(r["loss_mean"]) and r["z_std_mean"] > 0 for r in rounds)
    summary = json.loads((runs_dir / "four" / "summary.json").read_text())
    assert 0.0 <= summary["final"]["probe_acc_avg"] <= 1.0
