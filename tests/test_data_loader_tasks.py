"""PeerData epochs, task transforms (coarse labels, mosaics) and the public split."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from p2pfl.data.datasets import CIFAR10_CLASSES, synthetic_dataset
from p2pfl.data.loader import PeerData
from p2pfl.data.partition import partition
from p2pfl.data.tasks import (
    apply_task,
    coarse_labels,
    make_mosaic,
    mosaic_indices,
    split_public,
    task_info,
    transform_task,
)


@pytest.fixture(scope="module")
def ds():
    return synthetic_dataset(num_train=600, num_test=100, seed=1)


def test_peer_data_holds_its_shard(ds):
    parts = partition(ds.y_train, 4, "iid", seed=0)
    pd = PeerData.from_dataset(ds, parts[2], peer=2, seed=0)
    assert len(pd) == parts[2].size and pd.x.dtype == torch.uint8
    assert torch.equal(pd.x, ds.x_train[parts[2]]) and torch.equal(pd.y, ds.y_train[parts[2]])


def test_epoch_covers_the_shard_exactly_once(ds):
    idx = np.arange(0, 600, 3)  # 200 samples; the sample id is recoverable from its label row
    ids = torch.arange(600)
    pd = PeerData(ds.x_train, ids, idx, peer=0, seed=0)
    for drop_last, bs in ((False, 32), (True, 50), (False, 200)):
        seen = torch.cat([y for _, y in pd.batches(bs, drop_last=drop_last)])
        assert sorted(seen.tolist()) == idx.tolist()
        assert pd.steps_per_epoch(bs, drop_last) == (-(-200 // bs) if not drop_last else 200 // bs)
    # drop_last with a ragged end: each batch full, no repeats, 200 // 64 * 64 samples
    batches = list(pd.batches(64, drop_last=True))
    assert len(batches) == 3 and all(x.shape[0] == 64 for x, _ in batches)
    seen = torch.cat([y for _, y in batches])
    assert seen.unique().numel() == 192 and set(seen.tolist()) <= set(idx.tolist())


def test_images_travel_with_their_targets(ds):
    pd = PeerData.from_dataset(ds, np.arange(100), peer=1, seed=0)
    for x, y in pd.batches(16):
        # find each image in the dataset and check its label
        pos = [int((ds.x_train[:100] == xi).flatten(1).all(1).nonzero()[0]) for xi in x]
        assert torch.equal(ds.y_train[pos], y)


def test_epochs_differ_and_streams_are_per_peer_and_seeded(ds):
    idx = np.arange(128)
    ids = torch.arange(600)

    def orders(peer, seed, epochs=2):
        pd = PeerData(ds.x_train, ids, idx, peer=peer, seed=seed)
        return [torch.cat([y for _, y in pd.batches(32)]) for _ in range(epochs)]

    a = orders(0, 0)
    assert not torch.equal(a[0], a[1])
    assert all(torch.equal(u, v) for u, v in zip(a, orders(0, 0)))
    assert not torch.equal(a[0], orders(1, 0)[0])
    assert not torch.equal(a[0], orders(0, 1)[0])


def test_batches_draws_its_order_when_called(ds):
    """Creating an epoch advances the stream even if it is not iterated, so the next epoch does not depend
    on how much of this one was consumed."""
    ids = torch.arange(600)
    p1 = PeerData(ds.x_train, ids, np.arange(64), peer=0, seed=0)
    p2 = PeerData(ds.x_train, ids, np.arange(64), peer=0, seed=0)
    p1.batches(16)
    it = p2.batches(16)
    next(it)
    assert torch.equal(next(p1.batches(16))[1], next(p2.batches(16))[1])


def test_coarse_labels():
    y = torch.arange(10)
    vehicles = {"airplane", "automobile", "ship", "truck"}
    want = [0 if CIFAR10_CLASSES[k] in vehicles else 1 for k in range(10)]
    assert coarse_labels(y).tolist() == want
    assert task_info("cifar10-coarse").num_outputs == 2


def test_mosaic_pixels_and_targets(ds):
    x, y = ds.x_train[:50], ds.y_train[:50]
    m, t = make_mosaic(x, y, 40, seed=3, peer=2, purpose="mosaic-train")
    idx = mosaic_indices(50, 40, seed=3, peer=2, purpose="mosaic-train")
    assert m.shape == (40, 3, 32, 32) and m.dtype == torch.uint8 and t.shape == (40, 10)
    for i in range(40):
        present = set(int(y[j]) for j in idx[i])
        assert set(torch.nonzero(t[i]).flatten().tolist()) == present
        assert float(t[i].sum()) == len(present)
        quads = [m[i, :, :16, :16], m[i, :, :16, 16:], m[i, :, 16:, :16], m[i, :, 16:, 16:]]
        for q, j in zip(quads, idx[i]):
            # 2×2 block means of the source image, computed by reshaping
            src = x[j].double().view(3, 16, 2, 16, 2).mean(dim=(2, 4))
            assert (q.double() - src).abs().max() <= 0.5 + 1e-9
    # seeded: same arguments, same mosaics; another peer, other mosaics
    m2, t2 = make_mosaic(x, y, 40, seed=3, peer=2, purpose="mosaic-train")
    assert torch.equal(m, m2) and torch.equal(t, t2)
    assert not torch.equal(make_mosaic(x, y, 40, seed=3, peer=5, purpose="mosaic-train")[0], m)


def test_transform_and_apply_task(ds):
    x, y = ds.x_train[:20], ds.y_train[:20]
    assert transform_task("cifar10", x, y, seed=0)[1] is y
    assert torch.equal(transform_task("cifar10-coarse", x, y, seed=0)[1], coarse_labels(y))
    mx, my = transform_task("mosaic", x, y, seed=0, peer=1)
    assert mx.shape == x.shape and my.shape == (20, 10) and my.dtype == torch.float32
    mosaic = apply_task(ds, "mosaic", seed=0)
    assert mosaic.multilabel and mosaic.num_classes == 10 and mosaic.x_test.shape == ds.x_test.shape
    coarse = apply_task(ds, "cifar10-coarse", seed=0)
    assert coarse.num_classes == 2 and coarse.classes == ("vehicle", "animal") and not coarse.multilabel
    with pytest.raises(ValueError, match="choose one of"):
        task_info("segmentation")


def test_split_public(ds):
    priv, pub = split_public(ds, 100, seed=0)
    assert pub.size == 100 and priv.size == 500
    assert np.array_equal(np.sort(np.concatenate([priv, pub])), np.arange(600))
    assert np.all(np.diff(priv) > 0) and np.all(np.diff(pub) > 0)
    p2, q2 = split_public(600, 100, seed=0)
    assert np.array_equal(priv, p2) and np.array_equal(pub, q2)
    assert not np.array_equal(pub, split_public(600, 100, seed=1)[1])
    assert split_public(ds.y_train, 0.25, seed=0)[1].size == 150
    with pytest.raises(ValueError):
        split_public(600, 600, seed=0)
    # the private part is then partitioned and mapped back to dataset indices
    parts = [priv[p] for p in partition(ds.y_train[priv], 5, "iid", seed=0)]
    assert np.array_equal(np.sort(np.concatenate(parts)), priv)
