"""Splitting a labelled training set across K peers (SPEC §3): one registered class a file (`--partition`).

Every partition draws only from ``numpy_rng(seed, SHARED, "partition")``: it is a pure function of the labels,
the seed, K and its parameters, whichever process computes it. `partition(labels, n_peers, kind, seed, ...)` is
the one entry point; each file's docstring gives its scheme's details:

| partition | each peer holds | options |
|---|---|---|
| iid | a random 1/K of the data (±1) | — |
| dirichlet | per class, a Dir_K(alpha) share (MOON's rule) | --alpha, --min-size, --size-band |
| skew | a beta fraction IID, the rest whole classes (Dec-SSL's label skew) | --beta |
| one-class | the one class i mod C | — |
| shard | s shards of the label-sorted data (McMahan et al. 2017) | --shards-per-peer |
| pathological | exactly k classes, each class split equally among its holders | --classes-per-peer |
| inner-dirichlet | a size fixed beforehand, its class mix Dir_C(alpha) | --alpha, --inner-sizes |
| quantity | IID labels, sizes from a power law or a list | --quantity-exponent, --quantity-sizes |
| natural | whole natural groups (LEAF users), sizes balanced | — |

The rotation feature shift (--rotate-groups) is no partition: p2pfl.data.partition.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from p2pfl.data.partitions._base import PARTITIONS, Partition, PartitionError
from p2pfl.seeding import SHARED, numpy_rng

__all__ = ["PARTITIONS", "Partition", "PartitionError", "as_labels", "class_counts", "make", "partition", "record"]


def as_labels(labels: Any) -> np.ndarray:
    """`labels` (a tensor or array) as a 1-d int64 array of non-negative class labels; PartitionError otherwise."""
    if hasattr(labels, "detach"):  # a torch tensor
        labels = labels.detach().cpu().numpy()
    y = np.asarray(labels)
    if y.ndim != 1:
        raise PartitionError(f"partition needs a 1-d vector of class labels, got shape {y.shape}")
    if y.size and (y.min() < 0 or not np.issubdtype(y.dtype, np.integer)):
        raise PartitionError("partition needs non-negative integer class labels")
    return y.astype(np.int64, copy=False)


def make(kind: str, cfg: Any = None, **params: Any) -> Partition:
    """The partition `kind` with its parameters: the run's configuration `cfg` holds them under their names,
    keywords override (keywords no registered partition takes are a TypeError; another partition's are ignored,
    so one call serves every kind)."""
    if kind not in PARTITIONS:
        raise PartitionError(f"unknown partition {kind!r}; choose one of {', '.join(PARTITIONS)}")
    cls = PARTITIONS.get(kind)
    known = {name for other in PARTITIONS for name in PARTITIONS.get(other).parameters()}
    unknown = sorted(set(params) - known)
    if unknown:
        raise TypeError(f"partition(): unknown parameters {unknown}; the partitions take {sorted(known)}")
    own = cls.parameters()
    values = {name: getattr(cfg, name) for name in own if cfg is not None and hasattr(cfg, name)}
    values.update({name: value for name, value in params.items() if name in own})
    return cls(**values)


def partition(labels: Any, n_peers: int, kind: str, seed: int, num_classes: int | None = None, cfg: Any = None,
              groups: Any = None, **params: Any) -> list[np.ndarray]:
    """Split the indices 0..N−1 of ``labels`` among ``n_peers`` peers by the partition ``kind``, its parameters
    from ``cfg`` and the keywords (`make`), drawing from ``numpy_rng(seed, SHARED, "partition")``.

    Returns one int64 index array per peer; PartitionError (one line) when the split cannot be made or leaves a
    peer empty. Depends only on (labels, n_peers, kind, seed, parameters); a `grouped` partition (natural) on
    ``groups``, each sample's natural group (a LEAF user), instead of the labels.
    """
    y = as_labels(labels)
    n = y.size
    k = int(n_peers)
    if k < 1:
        raise PartitionError(f"n_peers must be at least 1, got {n_peers}")
    c = int(num_classes) if num_classes is not None else (int(y.max()) + 1 if n else 0)
    if n and y.max() >= c:
        raise PartitionError(f"labels go up to {int(y.max())} but num_classes is {c}")
    scheme = make(kind, cfg, **params)
    if scheme.grouped:
        if groups is None:
            raise PartitionError(f"{scheme.name} partition: the dataset gives no natural groups (users); "
                                 "--dataset leaf:PATH does, and csv:PATH with --natural-column")
        g = as_labels(groups)
        if g.size != n:
            raise PartitionError(f"{scheme.name} partition: {g.size} groups for {n} samples")
        parts = scheme.split_groups(g, k, numpy_rng(seed, SHARED, "partition"))
    else:
        parts = scheme.split(y, k, c, numpy_rng(seed, SHARED, "partition"))
    empty = [i for i, p in enumerate(parts) if p.size == 0]
    if empty:
        raise PartitionError(f"{scheme.name} partition of {n} samples over {k} peers leaves peers {empty[:10]} "
                             f"empty; use fewer peers or more data")
    return [np.asarray(p, dtype=np.int64) for p in parts]


def record(cfg: Any) -> dict[str, Any]:
    """The manifest's partition entry for the run's --partition: its kind, --alpha and --beta (as older runs have
    them), its own parameters and its label (the sizes and class counts are the caller's)."""
    scheme = make(cfg.partition, cfg)
    return {"kind": cfg.partition, "alpha": cfg.alpha, "beta": cfg.beta, "parameters": scheme.record(),
            "label": scheme.label()}


def class_counts(parts: list[np.ndarray], labels: Any, num_classes: int) -> np.ndarray:
    """Peers × classes matrix of how many samples of each class each peer holds (int64)."""
    y = as_labels(labels)
    return np.stack([np.bincount(y[np.asarray(p, dtype=np.int64)], minlength=num_classes)[:num_classes]
                     for p in parts]).astype(np.int64)
