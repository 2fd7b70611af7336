"""NT-Xent, MOON's contrastive term, InfoNCE and GRAM against direct float64 computations written with loops."""
import math

import numpy as np
import pytest
import torch

from p2pfl.losses import gram_loss, gram_volumes, infonce, moon_contrastive, nt_xent, pairwise_infonce


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _unit(v):
    return v / np.linalg.norm(v)


def _nt_xent_loops(z1, z2, t):
    z = [_unit(v) for v in np.concatenate([z1, z2], axis=0)]
    n = len(z)
    b = n // 2
    total = 0.0
    for k in range(n):
        pos = (k + b) % n
        den = sum(math.exp(float(z[k] @ z[j]) / t) for j in range(n) if j != k)
        total += -math.log(math.exp(float(z[k] @ z[pos]) / t) / den)
    return total / n


@pytest.mark.parametrize("seed,b,d,t", [(0, 4, 3, 0.5), (1, 7, 5, 0.1), (2, 3, 8, 1.0)])
def test_nt_xent_matches_loops(seed, b, d, t):
    g = _gen(seed)
    z1 = torch.randn(b, d, generator=g, dtype=torch.float64)
    z2 = torch.randn(b, d, generator=g, dtype=torch.float64)
    want = _nt_xent_loops(z1.numpy(), z2.numpy(), t)
    assert nt_xent(z1, z2, t).item() == pytest.approx(want, rel=1e-12)
    got32 = nt_xent(z1.float(), z2.float(), t).item()
    assert got32 == pytest.approx(want, rel=1e-5)


def test_nt_xent_rejects_bad_input():
    with pytest.raises(ValueError):
        nt_xent(torch.randn(4, 3), torch.randn(5, 3))
    with pytest.raises(ValueError):
        nt_xent(torch.randn(4, 3), torch.randn(4, 3), temperature=0.0)


def _moon_loops(z, zg, prevs, t):
    total = 0.0
    for i in range(len(z)):
        cos = lambda a, b: float(_unit(a) @ _unit(b))  # noqa: E731
        num = math.exp(cos(z[i], zg[i]) / t)
        den = num + sum(math.exp(cos(z[i], p[i]) / t) for p in prevs)
        total += -math.log(num / den)
    return total / len(z)


@pytest.mark.parametrize("n_prev", [1, 3])
def test_moon_contrastive_matches_loops(n_prev):
    g = _gen(10 + n_prev)
    z = torch.randn(6, 5, generator=g, dtype=torch.float64)
    zg = torch.randn(6, 5, generator=g, dtype=torch.float64)
    prevs = [torch.randn(6, 5, generator=g, dtype=torch.float64) for _ in range(n_prev)]
    want = _moon_loops(z.numpy(), zg.numpy(), [p.numpy() for p in prevs], 0.5)
    arg = prevs[0] if n_prev == 1 else prevs
    assert moon_contrastive(z, zg, arg, 0.5).item() == pytest.approx(want, rel=1e-12)
    # a stacked (K, B, d) pool is the same as a list
    assert moon_contrastive(z, zg, torch.stack(prevs), 0.5).item() == pytest.approx(want, rel=1e-12)


def test_moon_glob_equals_prev_gives_log2_and_no_gradient():
    g = _gen(3)
    z = torch.randn(8, 4, generator=g, dtype=torch.float64, requires_grad=True)
    ref = torch.randn(8, 4, generator=g, dtype=torch.float64)
    loss = moon_contrastive(z, ref, ref.clone(), temperature=0.5)
    assert loss.item() == pytest.approx(math.log(2.0), rel=1e-12)
    (grad,) = torch.autograd.grad(loss, z)
    assert grad.abs().max().item() < 1e-14


def test_moon_references_are_constants_and_round_one_is_zero():
    g = _gen(4)
    z = torch.randn(5, 3, generator=g, requires_grad=True)
    zg = torch.randn(5, 3, generator=g, requires_grad=True)
    zp = torch.randn(5, 3, generator=g, requires_grad=True)
    moon_contrastive(z, zg, zp).backward()
    assert z.grad is not None and zg.grad is None and zp.grad is None
    assert moon_contrastive(z, zg, None).item() == 0.0
    assert moon_contrastive(z, zg, []).item() == 0.0


def _infonce_loops(a, o, t):
    a = [_unit(v) for v in a]
    o = [_unit(v) for v in o]
    total = 0.0
    for i in range(len(a)):
        den = sum(math.exp(float(a[i] @ o[j]) / t) for j in range(len(o)))
        total += -(float(a[i] @ o[i]) / t - math.log(den))
    return total / len(a)


def test_infonce_and_pairwise_match_loops():
    g = _gen(5)
    a = torch.randn(7, 6, generator=g, dtype=torch.float64)
    others = [torch.randn(7, 6, generator=g, dtype=torch.float64) for _ in range(3)]
    parts = [_infonce_loops(a.numpy(), o.numpy(), 0.2) for o in others]
    assert infonce(a, others[0], 0.2).item() == pytest.approx(parts[0], rel=1e-12)
    assert pairwise_infonce(a, others, 0.2).item() == pytest.approx(sum(parts), rel=1e-12)
    assert pairwise_infonce(a, torch.stack(others), 0.2).item() == pytest.approx(sum(parts), rel=1e-12)


def _gram_loss_loops(a, others, t):
    a = [_unit(v) for v in a]
    others = [[_unit(v) for v in o] for o in others]
    b = len(a)
    total = 0.0
    for i in range(b):
        logits = []
        for j in range(b):
            vecs = np.stack([a[i]] + [o[j] for o in others])
            logits.append(-math.sqrt(max(np.linalg.det(vecs @ vecs.T), 0.0)) / t)
        mx = max(logits)
        lse = mx + math.log(sum(math.exp(x - mx) for x in logits))
        total += lse - logits[i]
    return total / b


@pytest.mark.parametrize("m", [1, 2, 3])
def test_gram_loss_matches_determinants(m):
    g = _gen(20 + m)
    a = torch.randn(6, 5, generator=g, dtype=torch.float64, requires_grad=True)
    others = [torch.randn(6, 5, generator=g, dtype=torch.float64) for _ in range(m)]
    want = _gram_loss_loops(a.detach().numpy(), [o.numpy() for o in others], 0.07)
    loss = gram_loss(a, others)
    assert loss.item() == pytest.approx(want, rel=1e-9)
    loss.backward()
    assert torch.isfinite(a.grad).all()


def test_gram_volume_extremes():
    eye = torch.eye(4, dtype=torch.float64)
    # identical vectors span no volume; orthonormal ones span volume 1
    same = gram_volumes(eye[:1], eye[:1].unsqueeze(0).repeat(2, 1, 1))
    assert same.item() == pytest.approx(0.0, abs=1e-7)
    ortho = gram_volumes(eye[:1], torch.stack([eye[1:2], eye[2:3]]))
    assert ortho.item() == pytest.approx(1.0, rel=1e-12)
