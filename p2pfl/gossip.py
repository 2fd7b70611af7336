"""Gossip averaging over the neighbour exchange, and the consensus distance of what was mixed."""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from p2pfl.comm.exchange import Exchange
from p2pfl.comm.world import World


def mixing_row(W: np.ndarray, peer: int, active: set[int], sizes: Sequence[float] | None = None
               ) -> list[tuple[int, float]]:
    """Peer's weights over its active closed neighbourhood, ascending by neighbour, summing to 1.

    Inactive neighbours drop out and the row is renormalised (SPEC §2, partial participation); with `sizes`
    each weight W_ij is scaled by n_j first (data-size weighting: exact FedAvg on complete/uniform).
    """
    row = [(j, float(W[peer, j])) for j in np.flatnonzero(W[peer]) if j in active or j == peer]
    if sizes is not None:
        row = [(j, w * float(sizes[j])) for j, w in row]
    total = sum(w for _, w in row)
    return [(int(j), w / total) for j, w in sorted(row)]


def gossip(exchange: Exchange, W: np.ndarray, vectors: dict[int, torch.Tensor], round: int,
           active: set[int] | None = None, sizes: Sequence[float] | None = None, kind: str = "params"
           ) -> dict[int, torch.Tensor]:
    """x_i ← Σ_j W_ij x_j for every local active peer; the sum runs in ascending j, so the result is
    bitwise the same whichever ranks the peers sit on."""
    n = exchange.placement.n_peers
    active = set(range(n)) if active is None else set(active)
    inbox = exchange.exchange(vectors, round, kind=kind, active=active)
    mixed: dict[int, torch.Tensor] = {}
    for peer, received in inbox.items():
        acc = torch.zeros_like(vectors[peer])
        for j, w in mixing_row(W, peer, active, sizes):
            acc.add_(vectors[peer] if j == peer else received[j], alpha=w)
        mixed[peer] = acc
    return mixed


def exact_mean(world: World, vectors: dict[int, torch.Tensor], n_peers: int) -> torch.Tensor:
    """The average over all peers of their vectors, summed exactly in fixed point (int64), so that the
    result does not depend on which rank holds which peer or on the order of the reduction."""
    sample = next(iter(vectors.values()))
    local_max = max(float(v.abs().max()) for v in vectors.values()) if vectors else 0.0
    global_max = world.allreduce_max(local_max)
    if global_max == 0.0 or not math.isfinite(global_max):
        return torch.zeros_like(sample, dtype=torch.float64) + (global_max if not math.isfinite(global_max) else 0)
    shift = 61 - math.ceil(math.log2(global_max * n_peers))
    total = torch.zeros(sample.numel(), dtype=torch.int64)
    for peer in sorted(vectors):
        total += torch.round(torch.ldexp(vectors[peer].detach().reshape(-1).double().cpu(),
                                         torch.tensor(float(shift), dtype=torch.float64))).long()
    world.allreduce_sum_(total.numpy())
    mean = torch.ldexp(total.double(), torch.tensor(float(-shift), dtype=torch.float64)) / n_peers
    return mean.reshape(sample.shape)


def consensus_distance(world: World, vectors: dict[int, torch.Tensor], n_peers: int) -> float | None:
    """(1/K) Σ_i ‖x_i − x̄‖² / ‖x̄‖² (SPEC §2); collective, the value is returned on rank 0 only.

    Every rank must hold at least one vector."""
    mean = exact_mean(world, vectors, n_peers)
    denom = float(mean.pow(2).sum())
    parts = {p: float((v.detach().reshape(mean.shape).double().cpu() - mean).pow(2).sum())
             for p, v in vectors.items()}
    gathered = world.gather(parts)
    if gathered is None:
        return None
    merged: dict[int, float] = {}
    for part in gathered:
        merged.update(part)
    total = 0.0
    for p in sorted(merged):
        total += merged[p]
    return total / n_peers / denom if denom > 0 else float("inf") if total > 0 else 0.0
