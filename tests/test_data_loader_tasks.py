"""PeerData epochs, task transforms (coarse labels, mosaics) and the public split."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from p2pfl.data.datasets import CIFAR10_CLASSES, synthetic_dataset
from p2pfl.data.loader import PeerData, ShardPool
from p2pfl.data.partition import partition
from p2pfl.fedmuscle.tasks import (
    coarse_labels,
    keep_labels,
    make_mosaic,
    make_task,
    mosaic_indices,
    split_public,
    task_outputs,
)


@pytest.fixture(scope="module")
def ds():
    return synthetic_dataset(num_train=600, num_test=100, seed=1)


def _epoch(pd: PeerData, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [pd.next_batch(batch) for _ in range(pd.steps_per_epoch(batch))]


def test_epoch_covers_the_shard_once_and_drops_the_ragged_end(ds):
    idx = torch.arange(0, 600, 3)  # 200 samples; the target is the sample id
    pd = PeerData(ds.x_train[idx], idx, peer=0, seed=0)
    for bs in (50, 200):
        seen = torch.cat([y for _, y in _epoch(pd, bs)])
        assert sorted(seen.tolist()) == idx.tolist()
    pd = PeerData(ds.x_train[idx], idx, peer=0, seed=0)
    batches = _epoch(pd, 64)  # each batch full, no repeats, 200 // 64 * 64 samples
    assert pd.steps_per_epoch(64) == 3 and all(x.shape[0] == 64 for x, _ in batches)
    seen = torch.cat([y for _, y in batches])
    assert seen.unique().numel() == 192 and set(seen.tolist()) <= set(idx.tolist())


def test_images_travel_with_their_targets(ds):
    pd = PeerData(ds.x_train[:100], ds.y_train[:100], peer=1, seed=0)
    for x, y in _epoch(pd, 16):
        pos = [int((ds.x_train[:100] == xi).flatten(1).all(1).nonzero()[0]) for xi in x]
        assert torch.equal(ds.y_train[pos], y)


def test_epochs_differ_and_streams_are_per_peer_and_seeded(ds):
    ids = torch.arange(128)

    def orders(peer, seed, epochs=2):
        pd = PeerData(ds.x_train[:128], ids, peer=peer, seed=seed)
        return [torch.cat([y for _, y in _epoch(pd, 32)]) for _ in range(epochs)]

    a = orders(0, 0)
    assert not torch.equal(a[0], a[1])
    assert all(torch.equal(u, v) for u, v in zip(a, orders(0, 0)))
    assert not torch.equal(a[0], orders(1, 0)[0])
    assert not torch.equal(a[0], orders(0, 1)[0])


def test_the_cursor_resumes_mid_epoch_exactly(ds):
    """A shard restored from its state_dict continues with the same batches as one that was never saved."""
    ids = torch.arange(128)
    a, b = PeerData(ds.x_train[:128], ids, peer=2, seed=5), PeerData(ds.x_train[:128], ids, peer=2, seed=5)
    for _ in range(3):
        a.next_batch(32)
    b.load_state_dict(a.state_dict())
    for _ in range(7):  # past the epoch's end: the next permutation comes from the restored stream
        assert torch.equal(a.next_batch(32)[1], b.next_batch(32)[1])


def test_shard_pool_gives_each_peer_its_own_batches(ds):
    """One gather for several peers returns, peer after peer, exactly what each peer's next_batch would, through
    epoch ends of unequal shards and for any prefix of the peers; the shards become views of the pool."""
    cuts = [(0, 70), (70, 170), (170, 230), (230, 400)]  # 70, 100, 60, 170 images
    make = lambda: [PeerData(ds.x_train[a:b], ds.y_train[a:b], peer=p, seed=3)  # noqa: E731
                    for p, (a, b) in enumerate(cuts)]
    alone, pooled = make(), make()
    pool = ShardPool(pooled)
    assert pool.holds(pooled) and not pool.holds(alone)
    for d, (a, b) in zip(pooled, cuts):
        assert torch.equal(d.x, ds.x_train[a:b]) and d.x.untyped_storage().data_ptr() == pool.x.data_ptr()
    offsets = pool.offsets(pooled)
    for step in range(12):
        n = 4 - step % 3  # the peers still training are a prefix
        x, y = pool.next_batches(pooled[:n], offsets, 16)
        want = [d.next_batch(16) for d in alone[:n]]
        assert torch.equal(x, torch.cat([w[0] for w in want])) and torch.equal(y, torch.stack([w[1] for w in want]))
    for a, b in zip(alone, pooled):
        assert a.pos == b.pos and torch.equal(a.order, b.order)
        assert torch.equal(a.generator.get_state(), b.generator.get_state())
    with pytest.raises(ValueError, match="differ"):
        ShardPool([PeerData(ds.x_train[:10], ds.y_train[:10], peer=0, seed=0),
                   PeerData(ds.x_train[:10, :1], ds.y_train[:10], peer=1, seed=0)])
    with pytest.raises(ValueError, match="differ"):  # targets of another dtype would be promoted by torch.cat
        ShardPool([PeerData(ds.x_train[:10], ds.y_train[:10], peer=0, seed=0),
                   PeerData(ds.x_train[:10], ds.y_train[:10].float(), peer=1, seed=0)])


def test_coarse_labels():
    y = torch.arange(10)
    vehicles = {"airplane", "automobile", "ship", "truck"}
    want = [0 if CIFAR10_CLASSES[k] in vehicles else 1 for k in range(10)]
    assert coarse_labels(y).tolist() == want
    assert task_outputs("cifar10-coarse", None, 10) == 2


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


def test_make_task_per_kind(ds):
    x, y = ds.x_train[:20], ds.y_train[:20]
    assert make_task("cifar10", None, x, y, 10, seed=0, peer=1, purpose="train")[1] is y
    assert torch.equal(make_task("cifar10-coarse", None, x, y, 10, 0, 1, "train")[1], coarse_labels(y))
    mx, my = make_task("mosaic", None, x, y, 10, seed=0, peer=1, purpose="train")
    assert mx.shape == x.shape and my.shape == (20, 10) and my.dtype == torch.float32
    assert torch.equal(mx, make_mosaic(x, y, 20, 0, 1, "mosaic-train")[0])
    labels = (2, 5, 7)
    keep = torch.as_tensor(keep_labels(y, labels))
    xs, ys = make_task("classify", labels, x[keep], y[keep], 10, 0, 1, "train")
    assert ys.tolist() == [labels.index(int(v)) for v in y[keep]]  # re-indexed 0..L-1 in the set's order
    assert task_outputs("classify", labels, 10) == 3 and task_outputs("mosaic", labels, 10) == 3
    _, my = make_task("mosaic", labels, x[keep], y[keep], 10, 0, 1, "train")
    assert my.shape[1] == 3


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
