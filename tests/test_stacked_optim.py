"""StackedOptimizer against one torch.optim optimiser per peer (built by p2pfl.optim, as training builds them):
equal per peer under varying active prefixes, inactive peers bitwise untouched, state moving both ways.

Tolerance: the stacked steps run the same float32 formulas, but Adam's bias corrections are float64 per-peer
tensors rounded to float32 where torch passes Python scalars, and its step size is folded into the denominator,
so results may differ by a few float32 ulps per step; rtol 1e-5 (about 80 ulps) over a handful of steps with
atol 1e-7 (for entries near zero) leaves room for that and none for a wrong formula (a missed bias correction,
weight decay or momentum start changes results by far more)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from p2pfl.optim import OPTIMIZERS
from p2pfl.stacked_optim import StackedOptimizer

#: Two computation paths compared to a tolerance: rerun under other CPU kernels (scripts/test.sh).
pytestmark = pytest.mark.numerics

P = 4
SHAPES = [(3, 5), (5,), (2, 3, 3, 3)]
ACTIVE = [4, 4, 3, 2, 4, 1]
CASES = {
    "sgd-momentum-wd": ("sgd", {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4}),
    "sgd": ("sgd", {"lr": 0.1}),
    "sgd-nesterov-wd": ("sgd", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-4}),
    "adam": ("adam", {"lr": 1e-2, "momentum": 0.9}),  # the config's default momentum, ignored by Adam
    "adam-wd": ("adam", {"lr": 1e-2, "weight_decay": 1e-2}),
    "adamw": ("adamw", {"lr": 1e-2, "weight_decay": 0.05}),
}
TOL = {"rtol": 1e-5, "atol": 1e-7}


class PerPeer:
    """P separate models' parameters, each with its own torch.optim optimiser."""

    def __init__(self, kind: str, settings: dict, rows: list[torch.Tensor]) -> None:
        cfg = SimpleNamespace(**{"momentum": 0.0, "weight_decay": 0.0, "nesterov": False, "gossip": "average",
                                 **settings})
        self.params = [[nn.Parameter(t[i].clone()) for t in rows] for i in range(P)]
        self.opts = [OPTIMIZERS[kind](ps, cfg) for ps in self.params]

    def step(self, grads: list[torch.Tensor], n: int) -> None:
        for i in range(n):
            for p, g in zip(self.params[i], grads):
                p.grad = g[i].clone()
            self.opts[i].step()

    def set_lr(self, lr: float) -> None:
        for opt in self.opts:
            for group in opt.param_groups:
                group["lr"] = lr


def stacked_params(seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(P, *s, generator=g) for s in SHAPES]


def gradients(step: int, n: int) -> list[torch.Tensor]:
    """Random gradients of step `step`: all P peers' on even steps, only the active n's on odd ones."""
    g = torch.Generator().manual_seed(1000 + step)
    return [torch.randn(P if step % 2 == 0 else n, *s, generator=g) for s in SHAPES]


def make(name: str) -> tuple[list[torch.Tensor], StackedOptimizer, PerPeer]:
    kind, settings = CASES[name]
    stacked = stacked_params()
    ref = PerPeer(kind, settings, stacked)
    return stacked, StackedOptimizer(stacked, kind, **settings), ref


def assert_same(stacked: list[torch.Tensor], ref: PerPeer) -> None:
    for i in range(P):
        for t, p in zip(stacked, ref.params[i]):
            torch.testing.assert_close(t[i], p.detach(), **TOL)


def exported(opt: StackedOptimizer) -> list[list[dict[str, torch.Tensor]]]:
    """The stacked state as per-peer torch state (through fresh throwaway optimisers)."""
    settings = {"lr": opt.lr, "momentum": opt.momentum, "weight_decay": opt.weight_decay, "nesterov": opt.nesterov}
    throwaway = PerPeer(opt.kind, settings, opt.params)
    opt.export_to(throwaway.opts, throwaway.params)
    return [[dict(o.state.get(p, {})) for p in ps] for o, ps in zip(throwaway.opts, throwaway.params)]


@pytest.mark.parametrize("name", CASES)
def test_matches_per_peer_torch_optimisers_under_varying_prefixes(name: str) -> None:
    stacked, opt, ref = make(name)
    for k, n in enumerate(ACTIVE):
        grads = gradients(k, n)
        before = [t.clone() for t in stacked]
        state_before = exported(opt)
        opt.step(grads, n if n < P or k % 2 else None)
        ref.step(grads, n)
        assert_same(stacked, ref)
        state_after = exported(opt)
        for i in range(n, P):
            assert all(torch.equal(t[i], b[i]) for t, b in zip(stacked, before))
            for s, b in zip(state_after[i], state_before[i]):
                assert s.keys() == b.keys() and all(torch.equal(s[key], b[key]) for key in s)
        for i in range(n):
            assert not torch.equal(stacked[0][i], before[0][i])
    expected_steps = [sum(n > i for n in ACTIVE) for i in range(P)]
    assert opt.steps.tolist() == expected_steps
    if opt.kind != "sgd":
        assert [float(o.state[ps[0]]["step"]) for o, ps in zip(ref.opts, ref.params)] == expected_steps


@pytest.mark.parametrize("name", CASES)
def test_export_then_continue_with_torch(name: str) -> None:
    stacked, opt, _ = make(name)
    first, rest = [3, 2, 3], [4, 1, 4, 2]  # peer 3 has not stepped at export: it must export as fresh
    for k, n in enumerate(first):
        opt.step(gradients(k, n), n)
    kind, settings = CASES[name]
    ref = PerPeer(kind, settings, stacked)
    opt.export_to(ref.opts, ref.params)
    assert all(p not in ref.opts[3].state for p in ref.params[3])
    if opt.momentum or kind != "sgd":
        assert all(p in ref.opts[0].state for p in ref.params[0])
    for k, n in enumerate(rest, start=len(first)):
        grads = gradients(k, n)
        opt.step(grads, n)
        ref.step(grads, n)
        assert_same(stacked, ref)


@pytest.mark.parametrize("name", CASES)
def test_load_from_torch_then_continue_stacked(name: str) -> None:
    kind, settings = CASES[name]
    ref = PerPeer(kind, settings, stacked_params())
    first, rest = [2, 3, 1], [4, 3, 1, 4]  # peer 3 has no torch state when loaded
    for k, n in enumerate(first):
        ref.step(gradients(k, n), n)
    stacked = [torch.stack([ps[j].detach() for ps in ref.params]) for j in range(len(SHAPES))]
    opt = StackedOptimizer(stacked, kind, **settings)
    opt.step(gradients(99, P))  # state to be replaced by the load
    opt.load_from(ref.opts, ref.params)
    stacked_now = [torch.stack([ps[j].detach() for ps in ref.params]) for j in range(len(SHAPES))]
    for t, s in zip(stacked, stacked_now):
        t.copy_(s)
    if kind != "sgd":
        assert opt.steps.tolist() == [3.0, 2.0, 1.0, 0.0]
    for k, n in enumerate(rest, start=len(first)):
        grads = gradients(k, n)
        opt.step(grads, n)
        ref.step(grads, n)
        assert_same(stacked, ref)


@pytest.mark.parametrize("name", ["sgd-momentum-wd", "adam-wd", "adamw"])
def test_learning_rate_changes_between_steps(name: str) -> None:
    stacked, opt, ref = make(name)
    for k, (n, lr) in enumerate(zip(ACTIVE, [0.1, 0.03, 0.05, 0.01, 0.2, 0.02])):
        opt.lr = lr * (0.1 if opt.kind != "sgd" else 1)
        ref.set_lr(opt.lr)
        grads = gradients(k, n)
        opt.step(grads, n)
        ref.step(grads, n)
        assert_same(stacked, ref)


def test_reset_state_bytes_and_empty_prefix() -> None:
    stacked, opt, _ = make("adam")
    param_bytes = sum(t.numel() * t.element_size() for t in stacked)
    steps_bytes = P * 4
    assert opt.state_bytes() == steps_bytes
    before = [t.clone() for t in stacked]
    opt.step(gradients(1, 0), 0)
    assert all(torch.equal(t, b) for t, b in zip(stacked, before)) and opt.steps.tolist() == [0.0] * P
    opt.step(gradients(0, P))
    assert opt.state_bytes() == steps_bytes + 2 * param_bytes
    opt.reset()
    assert opt.state_bytes() == steps_bytes and opt.steps.tolist() == [0.0] * P
    assert all(not s for peer in exported(opt) for s in peer)
    sgd = StackedOptimizer(stacked, "sgd", lr=0.1)
    sgd.step(gradients(0, P))
    assert sgd.state_bytes() == steps_bytes


def test_rejects_mismatched_settings_and_shapes() -> None:
    stacked, opt, _ = make("adam")
    wrong = PerPeer("adamw", {"lr": 1e-2}, stacked)
    with pytest.raises(ValueError, match="decoupled_weight_decay"):
        opt.load_from(wrong.opts, wrong.params)
    with pytest.raises(ValueError, match="gradient of shape"):
        opt.step([g[:, :1] for g in gradients(0, P)])
    with pytest.raises(ValueError, match="active prefix"):
        opt.step(gradients(0, P), P + 1)
