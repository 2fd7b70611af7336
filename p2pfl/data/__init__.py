"""Data layer: datasets, partitions across peers, batched augmentations, per-peer loaders and the run's workload.

Everything here is a pure function of (seed, K) or of (seed, peer, purpose) streams from :mod:`p2pfl.seeding`,
so results never depend on how peers are placed on processes.
"""
from p2pfl.data.augment import (
    SimCLRAugment,
    normalize,
    simclr_crop_scale,
    supervised_apply,
    supervised_augment,
    supervised_draw,
    to_geometry,
)
from p2pfl.data.datasets import (
    DATASETS,
    DatasetNotFound,
    ImageDataset,
    data_root,
    ensure_dataset,
    load_dataset,
    synthetic_dataset,
)
from p2pfl.data.loader import PeerData
from p2pfl.data.partition import random_subset, rotate_images, rotation_groups
from p2pfl.data.partitions import PARTITIONS, PartitionError, class_counts, partition

__all__ = [
    "DATASETS", "DatasetNotFound", "ImageDataset", "PARTITIONS", "PartitionError", "PeerData",
    "SimCLRAugment", "class_counts", "data_root", "ensure_dataset",
    "load_dataset", "normalize", "simclr_crop_scale", "partition", "random_subset", "rotate_images",
    "rotation_groups", "supervised_apply", "supervised_augment", "supervised_draw", "synthetic_dataset",
    "to_geometry",
]
