"""A run's data: the dataset on this rank's device, its partition over peers, and each local peer's shard."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from p2pfl.data.datasets import ImageDataset, ensure_dataset, load_dataset
from p2pfl.data.loader import PeerData
from p2pfl.data.partition import random_subset, rotate_images, rotation_groups
from p2pfl.data.partitions import class_counts, partition
from p2pfl.data.partitions import record as partition_record
from p2pfl.data.validation import carve
from p2pfl.runtime.limits import check_bytes

#: The bytes an entry of the peers × classes table of sample counts takes: int64, then a slot of the list that
#: manifest.json's class_counts is written from (its counts are small integers, which Python shares).
COUNT_BYTES = 8 + 8


@dataclass
class Workload:
    """The dataset (whole, on the device) and the partition; identical on every rank."""

    dataset: ImageDataset
    parts: list[np.ndarray]
    groups: list[int]
    seed: int
    rotate_groups: int
    manifest: dict[str, Any]
    #: the training set on each device the shards were asked for (`training_set`)
    held: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    @property
    def channels(self) -> int:
        """Image channels; features F for feature vectors."""
        return self.dataset.channels

    @property
    def image_size(self) -> int:
        """Image side; 1 for feature vectors (F channels of one pixel, as a model is built for them)."""
        return self.dataset.image_size

    def sizes(self) -> list[float]:
        """Shard sizes of all peers, in peer order."""
        return [float(p.size) for p in self.parts]

    def shard(self, peer: int, device: torch.device) -> PeerData:
        """Peer's training images as a PeerData on `device`: a view (its rows of the training set, which the rank
        holds once on `device`, gathered per batch), or under --rotate-groups a copy rotated for its group."""
        idx = torch.as_tensor(self.parts[peer])
        if self.rotate_groups > 1:  # the peer's images are its own: rotated once, not at every batch
            x = rotate_images(self.dataset.x_train[idx], self.groups[peer], self.rotate_groups)
            return PeerData(x, self.dataset.y_train[idx], peer=peer, seed=self.seed, device=device)
        x, y = self.training_set(device)
        return PeerData(x, y, peer=peer, seed=self.seed, device=device, rows=idx)

    def training_set(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The training images and targets on `device`, moved (and made contiguous) once for all the shards."""
        key = str(device)
        if key not in self.held:
            ds = self.dataset
            self.held[key] = (ds.x_train.to(device).contiguous(), ds.y_train.to(device))
        return self.held[key]


def prepare_datasets(names: list[str], cfg: Any, world: Any) -> None:
    """Make the datasets available: one rank per node decodes, caches or downloads; the others wait."""
    for name in sorted(set(names)):
        ensure_dataset(name, cfg.data_dir, allow_download=cfg.download, barrier=world.barrier,
                       is_node_leader=world.local_rank == 0, cfg=cfg)


def load_workload(cfg: Any, n_peers: int, world: Any) -> Workload:
    """Load --dataset (a seeded --train-subset of it) and partition it over the peers (a pure function of
    the seed and K); `manifest` holds the partition and dataset entries of manifest.json."""
    prepare_datasets([cfg.dataset], cfg, world)
    dataset = load_dataset(cfg.dataset, cfg.data_dir, cfg=cfg)
    if cfg.train_subset is not None and cfg.train_subset < dataset.x_train.shape[0]:
        keep = torch.as_tensor(random_subset(np.arange(dataset.x_train.shape[0]), cfg.train_subset, cfg.seed,
                                             f"train-subset/{dataset.name}"))
        dataset.x_train = dataset.x_train[keep]
        dataset.y_train = dataset.y_train[keep]
        if dataset.groups is not None:
            dataset.groups = dataset.groups[keep]
    check_bytes(f"--peers {n_peers} × {dataset.num_classes} classes of --dataset {cfg.dataset}: the table of each "
                "peer's samples per class", n_peers * dataset.num_classes * COUNT_BYTES)
    held = {"scored_on": "test"} if not cfg.validation else carve(dataset, cfg.validation, cfg.seed)
    labels = dataset.y_train.numpy()
    users = None if dataset.groups is None else dataset.groups.numpy()
    parts = partition(labels, n_peers, cfg.partition, cfg.seed, num_classes=dataset.num_classes, cfg=cfg,
                      groups=users)
    # each peer's natural groups (leaf: users, csv: --natural-column), by their number in the dataset's record
    natural = {} if users is None else {"groups": [np.unique(users[p]).tolist() for p in parts]}
    groups = rotation_groups(n_peers, cfg.rotate_groups)
    counts = class_counts(parts, labels, dataset.num_classes)
    manifest = {"partition": {**partition_record(cfg),
                              "sizes": [int(p.size) for p in parts], "class_counts": counts.tolist(),
                              "classes": list(dataset.classes), "rotation_groups": groups,
                              **natural},
                "dataset": {"name": dataset.name, "train": int(dataset.x_train.shape[0]),
                            "test": int(dataset.x_test.shape[0]), **held, **dataset.extra}}
    return Workload(dataset=dataset, parts=parts, groups=groups, seed=cfg.seed, rotate_groups=cfg.rotate_groups,
                    manifest=manifest)
