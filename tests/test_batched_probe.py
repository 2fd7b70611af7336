"""Batched per-peer evaluation (`linear_probes`, `knn_accuracies`) against the one-peer-at-a-time originals."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from p2pfl import evaluation as ev

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


def _gens(seed: int = 10) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(seed + i) for i in range(P)]


def _reference(monkeypatch, train_f, train_y, test_f, test_y):
    """Per-peer linear_probe; records each fitted nn.Linear so the learned weights can be compared."""
    fitted: list[nn.Linear] = []

    class Recording(nn.Linear):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            fitted.append(self)

    gens = _gens()
    with monkeypatch.context() as mp:
        mp.setattr(nn, "Linear", Recording)
        accs = [ev.linear_probe(train_f[i], train_y, test_f[i], test_y, C, EPOCHS, gens[i], batch=BATCH)
                for i in range(P)]
    assert len(fitted) == P
    return accs, fitted, gens


@pytest.mark.parametrize("scales", [None, [1e-3, 0.1, 1.0, 30.0, 1e3]])
def test_linear_probes_match_per_peer(monkeypatch, scales):
    """Same weights (float tolerance), accuracies and generator states as linear_probe per peer; the scaled case
    needs per-peer standardisation (peer scales span 6 orders of magnitude)."""
    train_f, train_y, test_f, test_y = _data(scales)
    ref_acc, fitted, ref_gens = _reference(monkeypatch, train_f, train_y, test_f, test_y)

    gens = _gens()
    weight, bias, mu, sigma = ev._linear_probes_fit(train_f, train_y, C, EPOCHS, gens, batch=BATCH)
    for i in range(P):
        torch.testing.assert_close(weight[i], fitted[i].weight.detach(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(bias[i], fitted[i].bias.detach(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(mu[i, 0], train_f[i].mean(0))
        torch.testing.assert_close(sigma[i, 0], train_f[i].std(0))
        assert torch.equal(gens[i].get_state(), ref_gens[i].get_state())

    gens = _gens()
    accs = ev.linear_probes(train_f, train_y, test_f, test_y, C, EPOCHS, gens, batch=BATCH)
    assert all(0.5 < a < 1.0 for a in accs)  # non-trivial (chance is 0.25)
    # The weights agree to float rounding (bmm vs mm), so a prediction can only flip for a test point sitting on a
    # decision boundary to ~1e-6; allow one such point (1/M), in practice they are equal.
    assert accs == pytest.approx(ref_acc, abs=1 / M + 1e-9)
    for g, r in zip(gens, ref_gens):
        assert torch.equal(g.get_state(), r.get_state())


def test_linear_probes_independent_of_chunk():
    train_f, train_y, test_f, test_y = _data([0.5, 1.0, 2.0, 4.0, 8.0], seed=1)
    results, states = [], []
    for chunk in (1, 2, 64):
        gens = _gens()
        results.append(ev.linear_probes(train_f, train_y, test_f, test_y, C, EPOCHS, gens, batch=BATCH, chunk=chunk))
        states.append([g.get_state() for g in gens])
    assert results[0] == results[1] == results[2]
    for s in states[1:]:
        assert all(torch.equal(a, b) for a, b in zip(s, states[0]))


def test_linear_probes_take_features_of_any_layout():
    """Features that arrive as a strided view (stacked peers' features on a GPU came as [N, P, D] transposed)
    give the same accuracies as the contiguous copy."""
    train_f, train_y, test_f, test_y = _data()
    strided_train = train_f.transpose(0, 1).contiguous().transpose(0, 1)
    strided_test = test_f.transpose(0, 1).contiguous().transpose(0, 1)
    assert not strided_train.is_contiguous()
    expected = ev.linear_probes(train_f, train_y, test_f, test_y, C, EPOCHS, _gens(), batch=BATCH)
    got = ev.linear_probes(strided_train, train_y, strided_test, test_y, C, EPOCHS, _gens(), batch=BATCH)
    assert got == expected


def test_linear_probes_rejects_shared_or_missing_generators():
    train_f, train_y, test_f, test_y = _data()
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="distinct"):
        ev.linear_probes(train_f, train_y, test_f, test_y, C, 1, [g] * P)
    with pytest.raises(ValueError, match="one generator per peer"):
        ev.linear_probes(train_f, train_y, test_f, test_y, C, 1, _gens()[:-1])


@pytest.mark.parametrize("k,batch,block", [(50, 64, 256 * 2**20), (200, 512, 256 * 2**20), (1000, 64, 1)])
def test_knn_accuracies_match_per_peer(k, batch, block):
    """Exactly knn_accuracy per peer, also with k > N and with a tiny block budget (one peer per chunk)."""
    train_f, train_y, test_f, test_y = _data([1e-2, 1.0, 1.0, 5.0, 1e2], seed=2)
    ref = [ev.knn_accuracy(train_f[i], train_y, test_f[i], test_y, C, k=k, batch=batch) for i in range(P)]
    accs = ev.knn_accuracies(train_f, train_y, test_f, test_y, C, k=k, batch=batch, max_block_bytes=block)
    assert accs == ref
    assert all(a > 0.5 for a in accs)
