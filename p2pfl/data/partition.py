"""The rotation feature shift (--rotate-groups: peer groups see their images rotated, SPEC §3) and seeded subsets;
the partitions themselves are the registered components of p2pfl.data.partitions, re-exported here for callers.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from p2pfl.data.partitions import PartitionError, class_counts, partition
from p2pfl.seeding import SHARED, numpy_rng

__all__ = ["PartitionError", "class_counts", "partition", "random_subset", "rotate_affine", "rotate_images",
           "rotation_groups"]


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
