"""A run's data: the dataset on this rank's device, its partition over peers, and each local peer's shard."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from p2pfl.config import RunConfig
from p2pfl.data import (random_subset, ImageDataset, PeerData, class_counts, ensure_dataset, load_dataset, partition,
                        rotate_images, rotation_groups)
from p2pfl.rounds import RunContext


@dataclass
class Workload:
    """The dataset (whole, on the device) and the partition; identical on every rank."""

    dataset: ImageDataset
    parts: list[np.ndarray]
    groups: list[int]

    @property
    def channels(self) -> int:
        return int(self.dataset.x_train.shape[1])

    @property
    def image_size(self) -> int:
        return int(self.dataset.x_train.shape[-1])

    def shard(self, peer: int, cfg: RunConfig, device: torch.device) -> PeerData:
        """Peer's training images (rotated for its group under --rotate-groups) as a PeerData on `device`."""
        idx = torch.as_tensor(self.parts[peer])
        x = self.dataset.x_train[idx]
        if cfg.rotate_groups > 1:
            x = rotate_images(x, self.groups[peer], cfg.rotate_groups)
        return PeerData(x, self.dataset.y_train[idx], peer=peer, seed=cfg.seed, device=device)


def load_workload(ctx: RunContext) -> Workload:
    """Load the dataset (downloading on one rank per node when allowed) and partition it over the peers."""
    cfg, world = ctx.cfg, ctx.world
    if cfg.dataset != "synthetic":  # one rank per node decodes, caches or downloads; the others wait
        ensure_dataset(cfg.dataset, cfg.data_dir, allow_download=cfg.download, barrier=world.barrier,
                       is_node_leader=world.local_rank == 0)
    dataset = load_dataset(cfg.dataset, cfg.data_dir)
    if cfg.train_subset is not None and cfg.train_subset < dataset.x_train.shape[0]:
        keep = torch.as_tensor(random_subset(np.arange(dataset.x_train.shape[0]), cfg.train_subset, cfg.seed,
                                             f"train-subset/{dataset.name}"))
        dataset.x_train = dataset.x_train[keep]
        dataset.y_train = dataset.y_train[keep]
    labels = dataset.y_train.numpy()
    parts = partition(labels, ctx.n_peers, cfg.partition, cfg.seed, alpha=cfg.alpha, beta=cfg.beta,
                      min_size=cfg.min_size, num_classes=dataset.num_classes)
    groups = rotation_groups(ctx.n_peers, cfg.rotate_groups)
    counts = class_counts(parts, labels, dataset.num_classes)
    ctx.record_manifest(partition={"kind": cfg.partition, "alpha": cfg.alpha, "beta": cfg.beta,
                                   "sizes": [int(p.size) for p in parts], "class_counts": counts.tolist(),
                                   "classes": list(dataset.classes), "rotation_groups": groups},
                        dataset={"name": dataset.name, "train": int(dataset.x_train.shape[0]),
                                 "test": int(dataset.x_test.shape[0]), **dataset.extra})
    return Workload(dataset=dataset, parts=parts, groups=groups)
