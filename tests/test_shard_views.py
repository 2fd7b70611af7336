"""Shards as views of the rank's training set (p2pfl.data.workload.Workload.shard): index lists gathered per batch,
giving exactly the batches of a shard copied out of the training set, and the manifest saying what a shard holds."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from p2pfl.data import PeerData
from p2pfl.data.loader import ShardPool
from p2pfl.data.partition import rotate_images

from helpers_inproc import setup_algorithm

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
#: Unequal shards (Dirichlet), so that epochs end at different steps.
OPTIONS = {"algorithm": "fedavg", "peers": 5, "partition": "dirichlet", "train_subset": 600, "batch_size": 16}


def _copies(work, peer: int, device: torch.device | str = "cpu") -> PeerData:
    """The reference: the peer's shard copied out of the training set, as set-up built it before views."""
    idx = torch.as_tensor(work.parts[peer])
    x = work.dataset.x_train[idx]
    if work.rotate_groups > 1:
        x = rotate_images(x, work.groups[peer], work.rotate_groups)
    return PeerData(x, work.dataset.y_train[idx], peer=peer, seed=work.seed, device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_a_shard_is_its_rows_of_the_training_set_and_batches_as_a_copy(tmp_path: Path, device: str) -> None:
    """Every peer's shard shares the training set's storage (on a CPU the loaded set itself, on a GPU its one copy
    there), its rows are its partition, and over several epochs each batch is bitwise the batch of a copied shard;
    whole-shard reads (x, y, first) too."""
    algo = setup_algorithm(tmp_path, device=device, **OPTIONS)
    work = algo.work
    train_x, train_y = work.training_set(algo.ctx.device)
    if device == "cpu":
        assert train_x.data_ptr() == work.dataset.x_train.data_ptr()
    for p, peer in algo.peers.items():
        data = peer.data
        assert data.rows is not None and data.rows.tolist() == work.parts[p].tolist()
        assert data.source_x.data_ptr() == train_x.data_ptr() and data.source_y.data_ptr() == train_y.data_ptr()
        assert data.own_bytes() == 8 * len(work.parts[p])
        assert data.shared_bytes() == train_x.numel() + 8 * train_y.numel()
        ref = _copies(work, p, algo.ctx.device)
        assert len(data) == len(ref) and torch.equal(data.x, ref.x) and torch.equal(data.y, ref.y)
        assert all(torch.equal(a, b) for a, b in zip(data.first(7), (ref.x[:7], ref.y[:7])))
        for _ in range(3 * ref.steps_per_epoch(16) + 2):  # through epoch ends
            (x, y), (rx, ry) = data.next_batch(16), ref.next_batch(16)
            assert torch.equal(x, rx) and torch.equal(y, ry)


def test_the_pool_of_views_gathers_each_peers_batches_without_copying(tmp_path: Path) -> None:
    """A ShardPool over views keeps the training set as its images (no concatenated copy) and returns, for any
    prefix of the peers, exactly the batches each copied shard would give alone."""
    algo = setup_algorithm(tmp_path, **OPTIONS)
    work = algo.work
    datas = [algo.peers[p].data for p in sorted(algo.peers)]
    pool = ShardPool(datas)
    assert pool.x is datas[0].source_x and pool.rows is not None and pool.holds(datas)
    refs = [_copies(work, p) for p in sorted(algo.peers)]
    offsets = pool.offsets(datas)
    for step in range(12):
        n = len(datas) - step % 3
        x, y = pool.next_batches(datas[:n], offsets, 16)
        want = [r.next_batch(16) for r in refs[:n]]
        assert torch.equal(x, torch.cat([w[0] for w in want])) and torch.equal(y, torch.stack([w[1] for w in want]))
    moved = PeerData(datas[0].x, datas[0].y, peer=0, seed=0)
    assert not pool.holds([moved])


def test_the_manifest_records_views_and_the_shared_training_set(tmp_path: Path) -> None:
    algo = setup_algorithm(tmp_path, **OPTIONS)
    memory = algo.ctx.manifest_extra["memory"]
    sizes = [len(part) for part in algo.work.parts]
    assert memory["shards"] == "views"
    assert memory["shard_bytes_mean"] == pytest.approx(8 * sum(sizes) / len(sizes))
    assert memory["shard_bytes_max"] == 8 * max(sizes)
    ds = algo.work.dataset
    assert memory["shared_bytes_per_rank"] == ds.x_train.numel() * ds.x_train.element_size() + 8 * ds.y_train.numel()


def test_rotated_shards_are_copies_with_the_same_batches(tmp_path: Path) -> None:
    """Under --rotate-groups a peer's images are its own (rotated once): copies, recorded as such, batching as
    the reference."""
    algo = setup_algorithm(tmp_path, **OPTIONS, rotate_groups=4)
    assert algo.ctx.manifest_extra["memory"]["shards"] == "copies"
    assert algo.ctx.manifest_extra["memory"]["shared_bytes_per_rank"] == 0
    for p, peer in algo.peers.items():
        assert peer.data.rows is None
        ref = _copies(algo.work, p)
        for _ in range(5):
            assert all(torch.equal(a, b) for a, b in zip(peer.data.next_batch(16), ref.next_batch(16)))
