"""DP-SGD (p2pfl.privacy.dp_sgd, issue 45 item 1): per-sample clipping bounds one sample's effect on a step, on the
per-peer and the peer-stacked path; the per-sample gradients are the autograd ones; the accountant's epsilon is the
one of an independent RDP computation of the Poisson-subsampled Gaussian (Mironov, Talwar, Zhang 2019: integer
orders, binomial expansion; dp_accounting is not installed here, so the reference is written below); a run's
records carry that epsilon; noise draws do not depend on placement (1 vs 2 ranks bit for bit); without the options
nothing is added; what cannot take DP-SGD is refused in one line."""
from __future__ import annotations

import json
import math
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from p2pfl.algorithms.batched import _per_peer
from p2pfl.algorithms.trainer import OneBatch
from p2pfl.config import ConfigError, make_config, validate
from p2pfl.models.stacked import PeerStack, fold, peer_stacked
from p2pfl.privacy.accountant import ORDERS, epsilon, noise_for
from p2pfl.privacy.dp_sgd import DPStep, stacked_loss

from conftest import one_and_two_ranks_agree

B, D, CLASSES, LR, CLIP = 8, 6, 3, 0.5, 0.1


def _criterion(out: torch.Tensor, y: torch.Tensor, refs: list) -> tuple[torch.Tensor, dict]:
    return F.cross_entropy(out, y), {}


def _model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(D, 5), nn.ReLU(), nn.Linear(5, CLASSES)).double()


def _batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """B samples, the last one far out (its gradient's norm is many times C, so clipping bites)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, D, generator=g, dtype=torch.float64)
    x[-1] *= 50.0
    return x, torch.randint(0, CLASSES, (B,), generator=g)


def _step(sigma: float, peers: int = 1, clip: float = CLIP) -> DPStep:
    return DPStep(clip, [sigma] * peers, [torch.Generator().manual_seed(7 + i) for i in range(peers)], B)


def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


def _one_peer_update(model: nn.Module, x: torch.Tensor, y: torch.Tensor, step: DPStep) -> torch.Tensor:
    """-lr · the gradient a peer trained alone steps along (OneBatch's DP-SGD loss, then autograd, as OnePeer)."""
    loss, _ = OneBatch(SimpleNamespace(model=model), x, y, [], step).model_loss(x, _criterion)
    return -LR * _flat(torch.autograd.grad(loss, list(model.parameters())))


def _stacked_update(models: list[nn.Module], xs: torch.Tensor, ys: torch.Tensor, step: DPStep) -> torch.Tensor:
    """-lr · the gradients ([n, d]) the peer-stacked path steps its members along (StackedBatch's DP-SGD loss)."""
    n = len(models)
    stack = PeerStack(models)
    params, buffers = stack.prefix(n, grad=True)
    leaves = [params[k] for k in stack.trainable]
    loss, _ = stacked_loss(step, peer_stacked(models[0]), params, buffers, stack.trainable, fold(xs), ys, [], n,
                           partial(_per_peer, n=n), _criterion)
    grads = torch.autograd.grad(loss.sum(), leaves)
    return -LR * torch.cat([g.reshape(n, -1) for g in grads], dim=1)


def _sample_grad_norm(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    loss = F.cross_entropy(model(x[None]), y[None])
    return float(_flat(torch.autograd.grad(loss, list(model.parameters()))).norm())


def test_one_sample_moves_a_step_of_a_peer_alone_by_at_most_lr_c_over_b() -> None:
    model, (x, y) = _model(0), _batch(1)
    assert _sample_grad_norm(model, x[-1], y[-1]) > 20 * CLIP  # the removed sample is clipped
    with_it = _one_peer_update(model, x, y, _step(0.0))
    without = _one_peer_update(model, x[:-1], y[:-1], _step(0.0))  # divided by the same expected B
    moved = float((with_it - without).norm())
    assert moved <= LR * CLIP / B * (1 + 1e-9)
    assert moved >= 0.99 * LR * CLIP / B  # the bound is met: a clipped sample moves the step by ~lr·C/B
    # without clipping (C far above every norm) the same sample moves the step far beyond lr·C/B
    loose = _one_peer_update(model, x, y, _step(0.0, clip=1e9)) - _one_peer_update(model, x[:-1], y[:-1],
                                                                                   _step(0.0, clip=1e9))
    assert float(loose.norm()) > 5 * LR * CLIP / B


def test_one_sample_moves_each_stacked_peer_by_at_most_lr_c_over_b() -> None:
    models = [_model(0), _model(1)]
    batches = [_batch(1), _batch(2)]
    xs, ys = torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches])
    with_it = _stacked_update(models, xs, ys, _step(0.0, peers=2))
    without = _stacked_update(models, xs[:, :-1], ys[:, :-1], _step(0.0, peers=2))
    for i in range(2):
        moved = float((with_it[i] - without[i]).norm())
        assert 0.99 * LR * CLIP / B <= moved <= LR * CLIP / B * (1 + 1e-9), i


@pytest.mark.numerics
def test_stacked_and_alone_take_the_same_private_step_noise_included() -> None:
    """Each stacked member's update, noise from its own stream, is the one it takes alone (float rounding aside)."""
    models = [_model(0), _model(1)]
    batches = [_batch(1), _batch(2)]
    xs, ys = torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches])
    stacked = _stacked_update(models, xs, ys, _step(1.3, peers=2))
    for i in range(2):
        alone_step = DPStep(CLIP, [1.3], [torch.Generator().manual_seed(7 + i)], B)
        alone = _one_peer_update(models[i], *batches[i], alone_step)
        torch.testing.assert_close(stacked[i], alone, rtol=1e-10, atol=1e-13)
        assert float((alone - _one_peer_update(models[i], *batches[i], _step(0.0))).norm()) > LR * CLIP / B


def test_unclipped_noiseless_gradient_is_the_batch_mean_gradient() -> None:
    """With C above every sample's norm and no noise, the private gradient is autograd's of the mean loss."""
    model, (x, y) = _model(3), _batch(4)
    expected = -LR * _flat(torch.autograd.grad(F.cross_entropy(model(x), y), list(model.parameters())))
    torch.testing.assert_close(_one_peer_update(model, x, y, _step(0.0, clip=1e9)), expected, rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------------------------------------------- accountant

def _log_add(a: float, b: float) -> float:
    if a == -math.inf:
        return b
    hi, lo = max(a, b), min(a, b)
    return hi + math.log1p(math.exp(lo - hi))


def reference_epsilon(sigma: float, q: float, steps: int, delta: float) -> float:
    """Mironov, Talwar, Zhang 2019 (Sec. 3.3): at an integer order a the RDP of the Poisson-subsampled Gaussian is
    log(Σ_k C(a,k) (1-q)^(a-k) q^k exp((k²-k)/(2σ²))) / (a-1), composed over `steps`; (ε, δ) by the conversion
    ε = rdp - (log δ + log a)/(a-1) + log((a-1)/a) (Balle et al. 2020, Prop. 12), minimised over the orders."""
    best = math.inf
    for a in ORDERS:
        log_sum = -math.inf
        for k in range(a + 1):
            if q == 1.0 and k < a:
                continue
            term = (math.lgamma(a + 1) - math.lgamma(k + 1) - math.lgamma(a - k + 1)
                    + (a - k) * (math.log1p(-q) if k < a else 0.0) + k * math.log(q) + (k * k - k) / (2 * sigma ** 2))
            log_sum = _log_add(log_sum, term)
        rdp = steps * log_sum / (a - 1)
        best = min(best, rdp - (math.log(delta) + math.log(a)) / (a - 1) + math.log((a - 1) / a))
    return best


@pytest.mark.parametrize("sigma, q, steps, delta", [(1.0, 0.01, 1000, 1e-5), (0.8, 0.05, 300, 1e-6),
                                                    (2.0, 0.2, 50, 1e-5), (1.5, 1.0, 10, 1e-5)])
def test_accountant_epsilon_is_the_subsampled_gaussian_rdp(sigma: float, q: float, steps: int, delta: float) -> None:
    assert epsilon(sigma, q, steps, delta) == pytest.approx(reference_epsilon(sigma, q, steps, delta), rel=1e-9)


def test_full_batch_is_the_gaussian_mechanism() -> None:
    """q = 1: RDP a·T/(2σ²) in closed form (Mironov 2017), no binomial sum."""
    sigma, steps, delta = 3.0, 20, 1e-5
    closed = min(a * steps / (2 * sigma ** 2) - (math.log(delta) + math.log(a)) / (a - 1) + math.log((a - 1) / a)
                 for a in ORDERS)
    assert epsilon(sigma, 1.0, steps, delta) == pytest.approx(closed, rel=1e-12)


def test_noise_for_a_target_spends_at_most_the_target() -> None:
    sigma = noise_for(2.0, 1e-5, 0.02, 500)
    assert 2.0 - 0.01 <= epsilon(sigma, 0.02, 500, 1e-5) <= 2.0
    assert epsilon(sigma * 0.98, 0.02, 500, 1e-5) > epsilon(sigma, 0.02, 500, 1e-5)


# ---------------------------------------------------------------------------------------------------- runs

RUN = ["-m", "p2pfl.run", "--algorithm", "fedavg", "--model", "simple-cnn", "--dataset", "synthetic", "--peers", "4",
       "--rounds", "2", "--local-steps", "2", "--batch-size", "16", "--eval-every", "2", "--no-progress",
       "--no-plots", "--dtype", "float64"]
DP = ["--dp-clip", "1.0", "--dp-noise", "1.1", "--dp-delta", "1e-5"]


def _simulate(out: Path, name: str, extra: dict):
    from p2pfl import simulate
    options = {"algorithm": "fedavg", "model": "simple-cnn", "dataset": "synthetic", "peers": 4, "rounds": 2,
               "local_steps": 2, "batch_size": 16, "eval_every": 2, "plots": False, "progress": False}
    return simulate(quiet=True, out=str(out), name=name, **{**options, **extra})


def test_a_run_records_each_peers_epsilon_as_the_reference_accounts_it(tmp_path: Path) -> None:
    run = _simulate(tmp_path, "dp", {"dp_clip": 1.0, "dp_noise": 1.1})
    sizes = run.manifest["partition"]["sizes"]
    rounds = [r for r in run.rounds if r["round"] >= 1]
    assert len(rounds) == 2
    for r in rounds:
        for p, n in enumerate(sizes):
            expected = reference_epsilon(1.1, 16 / n, 2 * r["round"], 1e-5)
            assert r["dp_epsilon"][str(p)] == pytest.approx(expected, rel=1e-9)
    assert run.summary["dp_epsilon"] == rounds[-1]["dp_epsilon"]
    assert run.summary["dp_epsilon_max"] == max(rounds[-1]["dp_epsilon"].values())


@pytest.mark.numerics
def test_the_stacked_path_trains_dp_sgd_as_the_loop_does(tmp_path: Path) -> None:
    """--batch-peers on (StackedBatch) and off (OneBatch) in a whole run: the same losses up to float rounding (the
    same samples, clipping and noise), the same epsilon."""
    runs = {mode: _simulate(tmp_path, mode, {"dp_clip": 1.0, "dp_noise": 1.1, "batch_peers": mode, "dtype": "float64"})
            for mode in ("on", "off")}
    assert runs["on"].manifest["batch_peers"]["ranks"][0]["batched"] is True
    assert runs["off"].manifest["batch_peers"]["ranks"][0]["batched"] is False
    for on, off in zip(runs["on"].rounds[1:], runs["off"].rounds[1:]):
        assert on["dp_epsilon"] == off["dp_epsilon"]
        for p, loss in off["loss"].items():
            assert on["loss"][p] == pytest.approx(loss, rel=1e-9)


def test_without_dp_options_nothing_is_added(tmp_path: Path) -> None:
    run = _simulate(tmp_path, "plain", {})
    keys = {k for r in run.rounds for k in r} | set(run.summary) | set(run.manifest)
    assert not [k for k in keys if k.startswith("dp")]


def test_a_target_epsilon_is_spent_by_the_end_and_not_beyond(tmp_path: Path) -> None:
    run = _simulate(tmp_path, "target", {"dp_clip": 1.0, "dp_epsilon": 3.0, "dp_delta": 1e-5})
    assert all(2.99 <= e <= 3.0 for e in run.summary["dp_epsilon"].values())


@pytest.mark.mpi
def test_dp_noise_is_placement_independent(tmp_path: Path) -> None:
    """The noise comes from each peer's own stream: one process and two ranks give the same records bit for bit."""
    runs = tmp_path / "runs"
    one, _ = one_and_two_ranks_agree([*RUN, *DP, "--out", str(runs)], runs)
    records = [json.loads(line) for line in (runs / "one" / "metrics.jsonl").read_text().splitlines()]
    assert any("dp_epsilon" in r for r in records) and one["dp_sgd"]["noise"] == 1.1


# ---------------------------------------------------------------------------------------------------- refusals

@pytest.mark.parametrize("options, message", [
    ({"algorithm": "dec-ssl", "dp_clip": 1.0, "dp_noise": 1.0}, "--dp-clip: DP-SGD clips each sample's gradient"),
    ({"algorithm": "consensus", "dp_clip": 1.0, "dp_noise": 1.0}, "--algorithm consensus cannot take it"),
    ({"algorithm": "fedavg", "dp_noise": 1.0}, "--dp-noise: DP-SGD needs the clipping norm too"),
    ({"algorithm": "fedavg", "dp_epsilon": 1.0}, "--dp-epsilon: DP-SGD needs the clipping norm too"),
    ({"algorithm": "fedavg", "dp_clip": 1.0}, "--dp-clip: DP-SGD needs its noise too"),
    ({"algorithm": "fedavg", "dp_clip": 1.0, "dp_noise": 1.0, "dp_epsilon": 2.0}, "--dp-noise: give --dp-noise"),
    ({"algorithm": "fedavg", "dp_clip": -1.0, "dp_noise": 1.0}, "--dp-clip: must be > 0"),
    ({"algorithm": "fedavg", "dp_clip": 1.0, "dp_noise": 1.0, "dp_delta": 1.0}, "--dp-delta: must lie in (0, 1)"),
])
def test_what_cannot_take_dp_sgd_is_refused_in_one_line(options: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate(make_config(dataset="synthetic", peers=4, **options))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_batchnorm_model_is_refused_before_training(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^--dp-clip: per-sample gradients are undefined under BatchNorm"):
        _simulate(tmp_path, "bn", {"model": "resnet-small", "dp_clip": 1.0, "dp_noise": 1.0})
