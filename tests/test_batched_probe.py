"""Batched per-peer evaluation (`linear_probes`, `knn_accuracies`) against the one-peer-at-a-time originals."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from p2pfl import evaluation as ev

#: Two computation paths compared to a tolerance: rerun under other CPU kernels (scripts/test.sh).
pytestmark = pytest.mark.numerics

P, N, M, D, C = 5, 600, 200, 16, 4
EPOCHS, BATCH = 4, 128  # 600 = 4 * 128 + 88: full and short minibatches


def _data(scales: list[float] | None = None, seed: int = 0):
    """Class means + noise per peer (non-trivial accuracies); optional per-peer scale and offset."""
    g = torch.Generator().manual_seed(seed)
    means = torch.randn(P, C, D, generator=g)
    train_y, test_y = torch.randint(0, C, (N,), generator=g), torch.randint(0, C, (M,), generator=g)
    train_f = means[:, train_y] + 1.5 * torch.randn(P, N, D, generator=g)
    test_f = means[:, test_y] + 1.5 * torch.randn(P, M, D, generator=g)
    if scales is not None:
        s = torch.tensor(scales).view(P, 1, 1)
        train_f, test_f = train_f * s + 3 * s, test_f * s + 3 * s
    return train_f, train_y, test_f, test_y


def _gen(seed: int = 10) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _reference(monkeypatch, train_f, train_y, test_f, test_y):
    """Per-peer linear_probe, each from a fresh generator of the same seed; records each fitted nn.Linear so the
    learned weights can be compared."""
    fitted: list[nn.Linear] = []

    class Recording(nn.Linear):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            fitted.append(self)

    gens = [_gen() for _ in range(P)]
    with monkeypatch.context() as mp:
        mp.setattr(nn, "Linear", Recording)
        accs = [ev.linear_probe(train_f[i], train_y, test_f[i], test_y, C, EPOCHS, gens[i], batch=BATCH)
                for i in range(P)]
    assert len(fitted) == P
    return accs, fitted, gens


@pytest.mark.parametrize("scales", [None, [1e-3, 0.1, 1.0, 30.0, 1e3]])
def test_linear_probes_match_per_peer(monkeypatch, scales):
    """Same weights (float tolerance), accuracies and generator state as linear_probe peer by peer with the same
    stream; the scaled case needs per-peer standardisation (peer scales span 6 orders of magnitude)."""
    train_f, train_y, test_f, test_y = _data(scales)
    ref_acc, fitted, ref_gens = _reference(monkeypatch, train_f, train_y, test_f, test_y)
    assert all(torch.equal(g.get_state(), ref_gens[0].get_state()) for g in ref_gens)

    gen = _gen()
    weight, bias, mu, sigma = ev._linear_probes_fit(train_f, train_y, C, EPOCHS, gen, batch=BATCH)
    for i in range(P):
        torch.testing.assert_close(weight[i], fitted[i].weight.detach(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(bias[i], fitted[i].bias.detach(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(mu[i], train_f[i].mean(0))
        torch.testing.assert_close(sigma[i], train_f[i].std(0))
    assert torch.equal(gen.get_state(), ref_gens[0].get_state())

    gen = _gen()
    accs = ev.linear_probes(train_f, train_y, test_f, test_y, C, EPOCHS, gen, batch=BATCH)
    assert all(0.5 < a < 1.0 for a in accs)  # non-trivial (chance is 0.25)
    # The weights agree to float rounding (bmm vs mm), so a prediction can only flip for a test point sitting on a
    # decision boundary to ~1e-6; allow one such point (1/M), in practice they are equal.
    assert accs == pytest.approx(ref_acc, abs=1 / M + 1e-9)
    assert torch.equal(gen.get_state(), ref_gens[0].get_state())


def test_linear_probes_independent_of_chunk():
    """A peer's probe does not depend on which peers share its chunk: one peer per chunk, two, all."""
    train_f, train_y, test_f, test_y = _data([0.5, 1.0, 2.0, 4.0, 8.0], seed=1)
    per_peer = N * D * 4
    results, states = [], []
    for max_bytes in (1, 2 * per_peer, 2**30):
        gen = _gen()
        results.append(ev.linear_probes(train_f, train_y, test_f, test_y, C, EPOCHS, gen, batch=BATCH,
                                        max_bytes=max_bytes))
        states.append(gen.get_state())
    assert results[0] == results[1] == results[2]
    assert all(torch.equal(s, states[0]) for s in states[1:])


def test_linear_probes_take_features_of_any_layout():
    """Features stored sample-major ([N, P, D], as peer_outputs and the stacked pass make them) and viewed as
    [P, N, D] give the same accuracies as the peer-major copy."""
    train_f, train_y, test_f, test_y = _data()
    strided_train = train_f.transpose(0, 1).contiguous().transpose(0, 1)
    strided_test = test_f.transpose(0, 1).contiguous().transpose(0, 1)
    assert not strided_train.is_contiguous()
    expected = ev.linear_probes(train_f, train_y, test_f, test_y, C, EPOCHS, _gen(), batch=BATCH)
    got = ev.linear_probes(strided_train, train_y, strided_test, test_y, C, EPOCHS, _gen(), batch=BATCH)
    assert got == expected


@pytest.mark.parametrize("k,batch,block", [(50, 64, 256 * 2**20), (200, 512, 256 * 2**20), (1000, 64, 1)])
def test_knn_accuracies_match_per_peer(k, batch, block):
    """Exactly knn_accuracy per peer, also with k > N and with a tiny block budget (one peer per chunk)."""
    train_f, train_y, test_f, test_y = _data([1e-2, 1.0, 1.0, 5.0, 1e2], seed=2)
    ref = [ev.knn_accuracy(train_f[i], train_y, test_f[i], test_y, C, k=k, batch=batch) for i in range(P)]
    accs = ev.knn_accuracies(train_f, train_y, test_f, test_y, C, k=k, batch=batch, max_block_bytes=block)
    assert accs == ref
    assert all(a > 0.5 for a in accs)
