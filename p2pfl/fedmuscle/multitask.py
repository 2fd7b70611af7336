"""The data of heterogeneous multi-task runs (FedMuscle, SPEC §6): each peer's task shard and test set, and the
public set in every input format the local peers use.

The public set is ``split_public`` of the public dataset's training images; peers reading that dataset train on
the rest. A task group is the peers with the same (dataset, task, label set), whatever their models. Task groups
reading the same dataset split its private pool in proportion to their sizes (a seeded shuffle,
``(seed, SHARED, "group-split/<dataset>")``), a label set keeps only those classes, and ``--partition``
(Dirichlet ``--alpha`` by default) splits each task group's pool over its peers. ``--train-subset N`` keeps N
images of each private pool, a seeded random subset (``(seed, SHARED, "train-subset/<dataset>")``; not the
first N, since the shared CIFAR-10 archive is sorted by class). Task group 0 partitions with ``--seed`` itself
(so a one-group run splits exactly like the other algorithms), task group g >= 1 with a seed derived from
(seed, g). Every peer of a task group is evaluated on the same test set (the dataset's test split in the task's
form; the spec's ``test_subset`` keeps a seeded random N of it, ``(seed, SHARED, "test-subset/<dataset>")``).

Public images (uint8) are converted once per geometry with :func:`~p2pfl.data.augment.to_geometry` (RGB -> gray
by luma, gray -> RGB by repetition, antialiased bilinear resize); a peer normalises them with its own dataset's
statistics, exactly like its private images.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from p2pfl.data.augment import ImageTransform, to_geometry
from p2pfl.data.datasets import DATASETS, ImageDataset, load_dataset
from p2pfl.data.loader import PeerData
from p2pfl.data.partition import random_subset
from p2pfl.data.partitions import class_counts, partition
from p2pfl.data.partitions import record as partition_record
from p2pfl.data.workload import prepare_datasets
from p2pfl.fedmuscle.peerspec import PeerEntry, PeersSpec, dataset_key
from p2pfl.fedmuscle.tasks import keep_labels, make_task, split_public, task_outputs
from p2pfl.seeding import SHARED, numpy_rng, stream_seed

PUBLIC_CONVERSION = ("RGB->gray by luma (0.2989, 0.587, 0.114) or gray->RGB by repetition, then antialiased "
                     "bilinear resize to the peer's size, uint8; normalised with the peer's own dataset statistics")


@dataclass
class PeerTask:
    """One local peer's side of the workload: its task shard, test set, input format and normalisation."""

    entry: PeerEntry
    data: PeerData
    test: tuple[torch.Tensor, torch.Tensor]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    #: Its dataset's images' training transform (the flip, the crop padding's fill).
    transform: ImageTransform
    channels: int
    image_size: int
    outputs: int

    @property
    def geometry(self) -> tuple[int, int]:
        return self.channels, self.image_size


@dataclass
class MultiTaskWorkload:
    """The spec's data on this rank: local peers' tasks, the public images per geometry, the partition."""

    spec: PeersSpec
    tasks: dict[int, PeerTask]
    public: dict[tuple[int, int], torch.Tensor]
    n_public: int
    parts: dict[int, np.ndarray]
    manifest: dict[str, Any] = field(default_factory=dict)


class _Datasets:
    """Each (dataset, options) loaded once."""

    def __init__(self, data_dir: str | None) -> None:
        self.data_dir = data_dir
        self.cache: dict[str, ImageDataset] = {}

    def get(self, name: str, options: dict) -> ImageDataset:
        key = dataset_key(name, options)
        if key not in self.cache:
            self.cache[key] = load_dataset(name, self.data_dir, **options)
        return self.cache[key]


def _dataset_pool(spec: PeersSpec, key: str, n: int, private_idx: np.ndarray, cfg: Any) -> np.ndarray:
    """The training indices the task groups reading dataset `key` (n training images) share: its private images
    (all, when it is not the public dataset), capped by --train-subset."""
    pool = private_idx if key == spec.public_key else np.arange(n, dtype=np.int64)
    if cfg.train_subset is not None:
        pool = random_subset(pool, cfg.train_subset, cfg.seed, f"train-subset/{key}")
    return pool


def used_training_indices(spec: PeersSpec, cfg: Any, dataset: str, n: int) -> np.ndarray:
    """Every training index of `dataset` (without options; n images) that a run of `spec` and `cfg` may read:
    its public set and the pool its peers' shards are cut from (python -m p2pfl.pretrain --held-out-of)."""
    key = dataset_key(dataset, {})
    private_idx, public_idx = split_public(n, spec.public_size, cfg.seed) if key == spec.public_key else (
        np.arange(n, dtype=np.int64), np.zeros(0, dtype=np.int64))
    used = [public_idx]
    if any(e.dataset_key == key for e in spec.peers):
        used.append(_dataset_pool(spec, key, n, private_idx, cfg))
    return np.unique(np.concatenate(used))


def _group_pools(spec: PeersSpec, groups: list[list[PeerEntry]], private_idx: np.ndarray, datasets: _Datasets,
                 cfg: Any) -> dict[int, np.ndarray]:
    """Each task group's pool of training indices: the private images of its dataset, capped by
    --train-subset, split among the groups that read the same dataset in proportion to their sizes."""
    by_key: dict[str, list[int]] = {}
    for g, members in enumerate(groups):
        by_key.setdefault(members[0].dataset_key, []).append(g)
    pools: dict[int, np.ndarray] = {}
    for key, gs in by_key.items():
        first = groups[gs[0]][0]
        n = int(datasets.get(first.dataset, first.dataset_options).x_train.shape[0])
        pool = _dataset_pool(spec, key, n, private_idx, cfg)
        if len(gs) == 1:
            pools[gs[0]] = pool
            continue
        sizes = np.array([len(groups[g]) for g in gs], dtype=np.float64)
        cuts = np.floor(np.cumsum(sizes) / sizes.sum() * pool.size).astype(np.int64)
        shuffled = pool[numpy_rng(cfg.seed, SHARED, f"group-split/{key}").permutation(pool.size)]
        for g, lo, hi in zip(gs, np.concatenate([[0], cuts[:-1]]), cuts):
            pools[g] = np.sort(shuffled[lo:hi])
    return pools


def _partition_groups(groups: list[list[PeerEntry]], pools: dict[int, np.ndarray], datasets: _Datasets,
                      cfg: Any) -> tuple[dict[int, np.ndarray], dict[int, list[int]]]:
    """--partition inside each task group over the dataset's classes: (peer -> indices, peer -> class counts)."""
    parts: dict[int, np.ndarray] = {}
    counts: dict[int, list[int]] = {}
    for g, members in enumerate(groups):
        e0 = members[0]
        ds = datasets.get(e0.dataset, e0.dataset_options)
        pool = pools[g]
        pool = pool[keep_labels(ds.y_train[torch.as_tensor(pool)], e0.labels)]
        labels = ds.y_train[torch.as_tensor(pool)].numpy()
        seed = cfg.seed if g == 0 else stream_seed(cfg.seed, SHARED, f"partition/group{g}")
        try:
            split = partition(labels, len(members), cfg.partition, seed, num_classes=ds.num_classes, cfg=cfg)
        except ValueError as exc:
            raise ValueError(f"--peers-spec: task group {g} ({e0.task} on {e0.dataset_key}, {len(members)} "
                             f"peers, {pool.size} images): {exc}") from None
        cc = class_counts(split, labels, ds.num_classes)
        for k, e in enumerate(members):
            parts[e.peer] = pool[split[k]]
            counts[e.peer] = [int(v) for v in cc[k]]
    return parts, counts


def load_multitask_workload(spec: PeersSpec, cfg: Any, world: Any, local_peers: list[int],
                            device: torch.device) -> MultiTaskWorkload:
    """Every peer's task data (a pure function of the seed and the spec), held on `device` for local peers."""
    prepare_datasets([e.dataset for e in spec.peers] + [spec.public_dataset], cfg, world)
    datasets = _Datasets(cfg.data_dir)
    public_ds = datasets.get(spec.public_dataset, spec.public_options)
    private_idx, public_idx = split_public(int(public_ds.x_train.shape[0]), spec.public_size, cfg.seed)
    n_public = int(public_idx.size)
    if cfg.public_batch > n_public:
        raise ValueError(f"--public-batch: {cfg.public_batch} exceeds the {n_public} public images")
    public_x = public_ds.x_train[torch.as_tensor(public_idx)]
    groups = spec.task_groups()
    group_of = {e.peer: g for g, members in enumerate(groups) for e in members}
    parts, counts = _partition_groups(groups, _group_pools(spec, groups, private_idx, datasets, cfg), datasets, cfg)

    tasks: dict[int, PeerTask] = {}
    public: dict[tuple[int, int], torch.Tensor] = {}
    tests: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for p in local_peers:
        e = spec.peers[p]
        ds = datasets.get(e.dataset, e.dataset_options)
        idx = torch.as_tensor(parts[p])
        coarse = DATASETS.get(e.dataset).coarse_classes or ()  # its coarse split (peerspec: set for cifar10-coarse)
        x, y = make_task(e.task, e.labels, ds.x_train[idx], ds.y_train[idx], ds.num_classes, cfg.seed, p, "train",
                         coarse)
        g = group_of[p]
        if g not in tests:
            keep = np.flatnonzero(keep_labels(ds.y_test, e.labels))
            if spec.test_subset is not None:
                keep = random_subset(keep, spec.test_subset, cfg.seed, f"test-subset/{e.dataset_key}")
            xt, yt = ds.x_test[torch.as_tensor(keep)], ds.y_test[torch.as_tensor(keep)]
            xt, yt = make_task(e.task, e.labels, xt, yt, ds.num_classes, cfg.seed, SHARED, "test", coarse)
            tests[g] = (xt.to(device), yt.to(device))
        task = PeerTask(entry=e, data=PeerData(x, y, peer=p, seed=cfg.seed, device=device), test=tests[g],
                        mean=tuple(ds.mean), std=tuple(ds.std), transform=ds.transform, channels=ds.channels,
                        image_size=ds.image_size, outputs=task_outputs(e.task, e.labels, ds.num_classes))
        if task.geometry not in public:
            public[task.geometry] = to_geometry(public_x, *task.geometry).to(device)
        tasks[p] = task

    n = spec.n_peers
    width = max(len(c) for c in counts.values())
    manifest = {
        "peers_spec": spec.manifest(),
        "public": {"dataset": spec.public_key, "size": n_public, "batch": cfg.public_batch, "rep_dim": cfg.rep_dim,
                   "source": spec.source, "conversion": PUBLIC_CONVERSION},
        "partition": {**partition_record(cfg), "within": "task group",
                      "sizes": [int(parts[p].size) for p in range(n)],
                      "class_counts": [counts[p] + [0] * (width - len(counts[p])) for p in range(n)],
                      "task_groups": [group_of[p] for p in range(n)]},
    }
    return MultiTaskWorkload(spec=spec, tasks=tasks, public=public, n_public=n_public, parts=parts,
                             manifest=manifest)
