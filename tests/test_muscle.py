"""The exact Muscle loss (SPEC §6) against an independent float64 enumeration and its defining properties."""
import itertools

import pytest
import torch

import p2pfl.losses.muscle as muscle_mod
from p2pfl.losses import infonce, muscle_loss, muscle_loss_naive, pairwise_infonce


def _inputs(seed, b, m, d=5, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    anchor = torch.randn(b, d, generator=g, dtype=dtype)
    others = [torch.randn(b, d, generator=g, dtype=dtype) for _ in range(m)]
    return anchor, others


def _brute_force(anchor, others, tau, tau_prev):
    """SPEC §6 written out: one score per (anchor, tuple) from itertools.product, then a log-sum-exp."""
    a = anchor / anchor.norm(dim=1, keepdim=True)
    z = [o / o.norm(dim=1, keepdim=True) for o in others]
    b, m = a.shape[0], len(z)
    gamma = 1.0 / tau_prev - 1.0 / tau
    columns, positive = [], None
    for j in itertools.product(range(b), repeat=m):
        s = sum(a @ z[k][j[k]] for k in range(m)) / tau  # all anchors at once, shape (B,)
        for x in range(m):
            for y in range(x + 1, m):
                s = s - gamma * (z[x][j[x]] @ z[y][j[y]])
        columns.append(s)
    scores = torch.stack(columns, dim=1)  # (B, B^M), columns in itertools order
    stride = sum(b**k for k in range(m))  # (i, ..., i) sits at column i * stride
    positive = scores[torch.arange(b), torch.arange(b) * stride]
    return (torch.logsumexp(scores, dim=1) - positive).mean()


def _value_and_grad(fn, anchor, others, *args, **kw):
    a = anchor.detach().clone().requires_grad_(True)
    loss = fn(a, others, *args, **kw)
    (g,) = torch.autograd.grad(loss, a)
    return loss.detach(), g


CASES = [(2, 1), (4, 1), (3, 2), (6, 2), (4, 3), (5, 3), (6, 3), (3, 4), (4, 4), (6, 4)]


@pytest.mark.parametrize("b,m", CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_brute_force_enumeration(b, m, seed):
    anchor, others = _inputs(100 * b + 10 * m + seed, b, m)
    tau, tau_prev = (0.2, 0.15) if seed != 2 else (0.5, 0.1)
    want, want_g = _value_and_grad(_brute_force, anchor, others, tau, tau_prev)
    got, got_g = _value_and_grad(muscle_loss, anchor, others, tau, tau_prev)
    assert torch.allclose(got, want, rtol=1e-10, atol=1e-12)
    assert torch.allclose(got_g, want_g, rtol=1e-8, atol=1e-11)
    naive, naive_g = _value_and_grad(muscle_loss_naive, anchor, others, tau, tau_prev)
    assert torch.allclose(naive, want, rtol=1e-10, atol=1e-12)
    assert torch.allclose(naive_g, want_g, rtol=1e-8, atol=1e-11)


@pytest.mark.parametrize("b,m", [(5, 1), (4, 2), (5, 3), (4, 4)])
def test_gamma_zero_is_pairwise_infonce(b, m):
    anchor, others = _inputs(7, b, m)
    got, got_g = _value_and_grad(muscle_loss, anchor, others, 0.3, 0.3)
    want, want_g = _value_and_grad(pairwise_infonce, anchor, others, 0.3)
    assert torch.allclose(got, want, rtol=1e-12)
    assert torch.allclose(got_g, want_g, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("tau_prev", [0.15, 0.05, 2.0])
def test_one_other_is_infonce(tau_prev):
    anchor, others = _inputs(8, 9, 1)
    got, got_g = _value_and_grad(muscle_loss, anchor, others, 0.2, tau_prev)
    want, want_g = _value_and_grad(lambda a, o, t: infonce(a, o[0], t), anchor, others, 0.2)
    assert torch.allclose(got, want, rtol=1e-12)
    assert torch.allclose(got_g, want_g, rtol=1e-10, atol=1e-13)


def test_order_of_others_does_not_matter():
    anchor, others = _inputs(9, 6, 4)
    ref, ref_g = _value_and_grad(muscle_loss, anchor, others)
    for perm in [(1, 0, 2, 3), (3, 2, 1, 0), (2, 0, 3, 1)]:
        got, got_g = _value_and_grad(muscle_loss, anchor, [others[k] for k in perm])
        assert torch.allclose(got, ref, rtol=1e-12)
        assert torch.allclose(got_g, ref_g, rtol=1e-10, atol=1e-13)


def test_list_and_stacked_others_agree_and_others_get_no_gradient():
    anchor, others = _inputs(10, 6, 3)
    a, b = _value_and_grad(muscle_loss, anchor, others)
    c, d = _value_and_grad(muscle_loss, anchor, torch.stack(others))
    assert torch.equal(a, c) and torch.equal(b, d)
    anchor = anchor.clone().requires_grad_(True)
    others = [o.clone().requires_grad_(True) for o in others]
    muscle_loss(anchor, others).backward()
    assert anchor.grad is not None and all(o.grad is None for o in others)


def test_float32_agrees_with_float64():
    anchor, others = _inputs(11, 16, 3, d=32)
    want, want_g = _value_and_grad(muscle_loss_naive, anchor, others)
    got, got_g = _value_and_grad(muscle_loss, anchor.float(), [o.float() for o in others])
    assert got.dtype == torch.float32
    assert abs(got.double() - want) <= 1e-4 * abs(want)
    assert (got_g.double() - want_g).abs().max() <= 1e-4 * want_g.abs().max()


@pytest.mark.parametrize(
    "tau,tau_prev", [(0.05, 0.04), (1.0, 0.5), (0.05, 1.0), (0.01, 0.15), (0.01, 0.005), (0.003, 0.15)]
)
def test_extreme_temperatures_stay_finite_and_exact_in_float32(tau, tau_prev):
    anchor, others = _inputs(12, 6, 4, d=4)
    want, want_g = _value_and_grad(muscle_loss_naive, anchor, others, tau, tau_prev)
    got, got_g = _value_and_grad(muscle_loss, anchor.float(), [o.float() for o in others], tau, tau_prev)
    assert torch.isfinite(got) and torch.isfinite(got_g).all()
    # float32 resolves scores of size ~M/tau to about 1e-7 of that size
    scale = max(abs(want.item()), 4 / tau)
    assert abs(got.item() - want.item()) <= 1e-5 * scale
    assert (got_g.double() - want_g).abs().max() <= 1e-4 * max(want_g.abs().max().item(), 1.0)


def test_chunked_equals_unchunked():
    anchor, others = _inputs(13, 5, 4)
    ref, ref_g = _value_and_grad(muscle_loss, anchor, others)
    for max_elements in [1, 7, 30, 124, 200, 625]:
        got, got_g = _value_and_grad(muscle_loss, anchor, others, max_elements=max_elements)
        assert torch.allclose(got, ref, rtol=1e-12)
        assert torch.allclose(got_g, ref_g, rtol=1e-10, atol=1e-13)


def test_log_space_recompute_path_is_exact(monkeypatch):
    """Force every entry of the matrix-product stage through the exact log-space fallback."""
    anchor, others = _inputs(14, 5, 3)
    ref, ref_g = _value_and_grad(muscle_loss, anchor, others, 0.1, 0.08)
    monkeypatch.setattr(muscle_mod, "_LOG_FLAG", float("inf"))
    for max_elements in [1 << 20, 7]:
        got, got_g = _value_and_grad(muscle_loss, anchor, others, 0.1, 0.08, max_elements=max_elements)
        assert torch.allclose(got, ref, rtol=1e-12)
        assert torch.allclose(got_g, ref_g, rtol=1e-10, atol=1e-13)


def test_nonnegative_and_no_grad_mode():
    anchor, others = _inputs(15, 8, 3, dtype=torch.float32)
    with torch.no_grad():
        value = muscle_loss(anchor, others)
    assert value.item() >= 0.0  # the positive tuple is one of the summands
    assert value.item() == pytest.approx(muscle_loss_naive(anchor, others).item(), rel=1e-5)


def test_user_errors():
    anchor, others = _inputs(16, 4, 2)
    with pytest.raises(ValueError):
        muscle_loss(anchor, [])
    with pytest.raises(ValueError):
        muscle_loss(anchor, torch.empty(0, 4, 5, dtype=torch.float64))
    with pytest.raises(ValueError):
        muscle_loss(anchor, [torch.randn(3, 5, dtype=torch.float64)])
    with pytest.raises(ValueError):
        muscle_loss(anchor, others, tau=0.0)
    with pytest.raises(ValueError):
        muscle_loss(anchor, others, max_elements=0)
