"""Splitting a labelled training set across K peers (SPEC §3), and the rotation feature shift.

Every partition draws only from ``numpy_rng(seed, SHARED, "partition")``: it is a pure function of the labels,
the seed, K and the scheme's parameters, whichever process computes it.

Schemes:
- ``iid``: a random permutation cut into K parts of equal size (±1).
- ``dirichlet``: MOON's label-Dirichlet (alpha): per class k, p ~ Dir_K(alpha); peers holding more than N/K
  samples already get p_j = 0; renormalise; cut the shuffled class indices at cumsum(p). The whole partition is
  redrawn until every peer holds at least ``min_size`` samples (at most ``max_tries`` draws, then
  :class:`PartitionError`). If a class's masked p sums to zero (tiny alpha), that class's Dirichlet draw is
  repeated. Each peer's indices are shuffled. With a size band (the Dec-SSL code's acceptance rule) a draw is
  kept only when every peer holds between (1 − band)·N/K and (1 + band)·N/K samples.
- ``skew``: Dec-SSL's label skew (beta): per class, a fraction beta of its (shuffled) samples goes to a uniform
  pool, the rest to a class-sorted pool. The uniform pool is shuffled and split equally. The sorted pool is cut
  into exclusive contiguous slices: when K ≤ C each peer takes ⌊C/K⌋ whole classes (peer i: classes
  i·⌊C/K⌋ … (i+1)·⌊C/K⌋ − 1; the sorted part of the C mod K classes left over is not used); when K > C the
  sorted pool is cut into K equal contiguous slices (neighbouring peers share a class). beta = 1 is iid,
  beta = 0 is fully class-sorted.
- ``one-class``: peer i holds class i mod C only; when K > C the peers sharing a class split its shuffled
  samples equally. K < C raises :class:`PartitionError` (use ``skew`` with beta = 0 for several classes a peer).
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from p2pfl.seeding import SHARED, numpy_rng

PARTITIONS = ("iid", "dirichlet", "skew", "one-class")


class PartitionError(ValueError):
    """A partition that cannot be made with the requested parameters."""


def _as_labels(labels) -> np.ndarray:
    if isinstance(labels, torch.Tensor):
        labels = labels.detach().cpu().numpy()
    y = np.asarray(labels)
    if y.ndim != 1:
        raise PartitionError(f"partition needs a 1-d vector of class labels, got shape {y.shape}")
    if y.size and (y.min() < 0 or not np.issubdtype(y.dtype, np.integer)):
        raise PartitionError("partition needs non-negative integer class labels")
    return y.astype(np.int64, copy=False)


def partition(labels, n_peers: int, kind: str, seed: int, alpha: float = 0.5, beta: float = 0.5,
              min_size: int = 10, num_classes: int | None = None, max_tries: int = 1000,
              size_band: float | None = None) -> list[np.ndarray]:
    """Split the indices 0..N−1 of ``labels`` among ``n_peers`` peers by ``kind`` (see the module docstring).

    Dirichlet redraws until every peer holds at least ``min_size`` samples (MOON's rule), or with ``size_band``
    until every peer holds between (1 − band)·N/K and (1 + band)·N/K (the Dec-SSL code's rule, band 0.5).

    Returns one int64 index array per peer. Depends only on (labels, n_peers, kind, seed, parameters).
    """
    y = _as_labels(labels)
    n = y.size
    k = int(n_peers)
    if k < 1:
        raise PartitionError(f"n_peers must be at least 1, got {n_peers}")
    c = int(num_classes) if num_classes is not None else (int(y.max()) + 1 if n else 0)
    if n and y.max() >= c:
        raise PartitionError(f"labels go up to {int(y.max())} but num_classes is {c}")
    kind = str(kind).lower().replace("_", "-")
    rng = numpy_rng(seed, SHARED, "partition")
    if kind == "iid":
        parts = _iid(n, k, rng)
    elif kind == "dirichlet":
        parts = _dirichlet(y, k, c, alpha, min_size, max_tries, rng, size_band)
    elif kind == "skew":
        parts = _skew(y, k, c, beta, rng)
    elif kind in ("one-class", "oneclass"):
        parts = _one_class(y, k, c, rng)
    else:
        raise PartitionError(f"unknown partition {kind!r}; choose one of {', '.join(PARTITIONS)}")
    empty = [i for i, p in enumerate(parts) if p.size == 0]
    if empty:
        raise PartitionError(f"{kind} partition of {n} samples over {k} peers leaves peers {empty[:10]} empty; "
                             f"use fewer peers or more data")
    return [np.asarray(p, dtype=np.int64) for p in parts]


def _iid(n: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    return list(np.array_split(rng.permutation(n), k))


def _dirichlet(y: np.ndarray, k: int, c: int, alpha: float, min_size: int, max_tries: int,
               rng: np.random.Generator, band: float | None = None) -> list[np.ndarray]:
    n = y.size
    if not alpha > 0:
        raise PartitionError(f"dirichlet alpha must be > 0, got {alpha}")
    if band is not None:
        if not 0 < band < 1:
            raise PartitionError(f"dirichlet size band must lie in (0, 1), got {band}")
        low, high = (1 - band) * n / k, (1 + band) * n / k
        min_size = max(min_size, math.ceil(low))
    if n < k * min_size:
        raise PartitionError(f"dirichlet partition: {n} samples cannot give each of {k} peers min_size={min_size}")
    by_class = [np.flatnonzero(y == cls) for cls in range(c)]
    cap = n / k
    smallest = 0
    for _ in range(max_tries):
        batches: list[list[np.ndarray]] = [[] for _ in range(k)]
        sizes = np.zeros(k, dtype=np.int64)
        for idx_c in by_class:
            idx_c = rng.permutation(idx_c)
            open_peers = sizes <= cap  # peers holding more than N/K get nothing more
            for _redraw in range(100):
                p = rng.dirichlet(np.full(k, float(alpha))) * open_peers
                if p.sum() > 0:
                    break
            else:  # Dirichlet draws kept underflowing on the open peers: share the class evenly among them
                p = open_peers.astype(np.float64)
            p = p / p.sum()
            cuts = (np.cumsum(p) * idx_c.size).astype(np.int64)[:-1]
            for j, chunk in enumerate(np.split(idx_c, cuts)):
                if chunk.size:
                    batches[j].append(chunk)
                    sizes[j] += chunk.size
        smallest = max(smallest, int(sizes.min()))
        if sizes.min() >= min_size and (band is None or sizes.max() <= high):
            return [rng.permutation(np.concatenate(b)) if b else np.empty(0, np.int64) for b in batches]
    if band is not None:
        raise PartitionError(f"dirichlet partition: no draw in {max_tries} kept all {k} peers within "
                             f"{low:.0f}..{high:.0f} samples (size band {band}, alpha={alpha}, N={n}); "
                             f"raise alpha or the band, or use fewer peers")
    raise PartitionError(f"dirichlet partition: no draw in {max_tries} gave all {k} peers at least "
                         f"min_size={min_size} samples (alpha={alpha}, N={n}, best smallest={smallest}); "
                         f"raise alpha, lower min_size or use fewer peers")


def _skew(y: np.ndarray, k: int, c: int, beta: float, rng: np.random.Generator) -> list[np.ndarray]:
    if not 0.0 <= beta <= 1.0:
        raise PartitionError(f"skew beta must lie in [0, 1], got {beta}")
    uniform, sorted_by_class = [], []
    for cls in range(c):
        idx_c = rng.permutation(np.flatnonzero(y == cls))
        n_uniform = int(round(beta * idx_c.size))
        uniform.append(idx_c[:n_uniform])
        sorted_by_class.append(idx_c[n_uniform:])
    uniform_parts = np.array_split(rng.permutation(np.concatenate(uniform)), k)
    if k <= c:
        q = c // k
        skew_parts = [np.concatenate(sorted_by_class[i * q:(i + 1) * q]) for i in range(k)]
    else:
        skew_parts = np.array_split(np.concatenate(sorted_by_class), k)
    return [rng.permutation(np.concatenate([u, s])) for u, s in zip(uniform_parts, skew_parts)]


def _one_class(y: np.ndarray, k: int, c: int, rng: np.random.Generator) -> list[np.ndarray]:
    if k < c:
        raise PartitionError(f"one-class partition needs at least as many peers as classes (K={k}, classes={c}); "
                             f"use skew with beta=0 to give each peer several whole classes")
    parts: list[np.ndarray] = [np.empty(0, np.int64)] * k
    for cls in range(c):
        owners = list(range(cls, k, c))
        shards = np.array_split(rng.permutation(np.flatnonzero(y == cls)), len(owners))
        for peer, shard in zip(owners, shards):
            parts[peer] = shard
    return parts


def class_counts(parts: list[np.ndarray], labels, num_classes: int) -> np.ndarray:
    """Peers × classes matrix of how many samples of each class each peer holds (int64)."""
    y = _as_labels(labels)
    return np.stack([np.bincount(y[np.asarray(p, dtype=np.int64)], minlength=num_classes)[:num_classes]
                     for p in parts]).astype(np.int64)


# ------------------------------------------------------------------------------------------------ rotation

def rotation_groups(n_peers: int, n_groups: int) -> list[int]:
    """Group of each peer for the rotation feature shift: G contiguous blocks of sizes differing by at most one
    (peer i is in group ⌊i·G/K⌋)."""
    if not 1 <= n_groups <= n_peers:
        raise PartitionError(f"rotation groups must satisfy 1 <= G <= K, got G={n_groups}, K={n_peers}")
    return [i * n_groups // n_peers for i in range(n_peers)]


def rotate_images(x: torch.Tensor, group: int, n_groups: int) -> torch.Tensor:
    """Rotate a batch B×C×H×W counter-clockwise by group·2π/G (SPEC §3, rotation feature shift).

    Multiples of 90° use ``torch.rot90`` (exact, any dtype); other angles a bilinear ``grid_sample`` with zeros
    outside (uint8 input comes back as rounded uint8)."""
    quarter_turns = 4 * group / n_groups
    if abs(quarter_turns - round(quarter_turns)) < 1e-9:
        k = int(round(quarter_turns)) % 4
        return x if k == 0 else torch.rot90(x, k, dims=(-2, -1))
    return rotate_affine(x, 2 * math.pi * group / n_groups)


def rotate_affine(x: torch.Tensor, angle: float) -> torch.Tensor:
    """Counter-clockwise rotation of a batch about the image centre by ``angle`` radians, bilinear, zero fill."""
    xf = x.to(torch.get_default_dtype())
    b, ch, h, w = xf.shape
    cos, sin = math.cos(angle), math.sin(angle)
    # output pixel (x_o, y_o) samples the input at R(angle)·(x_o, y_o) in pixel units, expressed in
    # normalised coordinates (x spans W, y spans H)
    theta = torch.tensor([[cos, -sin * h / w, 0.0], [sin * w / h, cos, 0.0]], dtype=xf.dtype, device=xf.device)
    grid = F.affine_grid(theta.expand(b, 2, 3), [b, ch, h, w], align_corners=False)
    out = F.grid_sample(xf, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    if x.dtype == torch.uint8:
        return out.round_().clamp_(0, 255).to(torch.uint8)
    return out.to(x.dtype)


def random_subset(indices: np.ndarray, size: int, seed: int, purpose: str) -> np.ndarray:
    """``size`` of ``indices`` drawn from ``numpy_rng(seed, SHARED, purpose)``, ascending (all when fewer).

    Not the first ``size``: the shared CIFAR-10 archive stores both splits sorted by class."""
    if size >= indices.size:
        return indices
    return np.sort(numpy_rng(seed, SHARED, purpose).choice(indices, size=size, replace=False))
