"""How an honest peer combines its own vector with what its neighbours sent (SPEC §2 replaced by a robust rule).

- mean: Σ_j W_ij x_j, the gossip step (not robust);
- trimmed-mean: coordinate-wise, the `trim` largest and `trim` smallest values of the closed neighbourhood are
  dropped and the rest averaged (all of them kept when fewer than 2·trim + 1 values);
- median: the coordinate-wise median of the closed neighbourhood;
- clipped-gossip (He, Karimireddy and Jaggi, 2022): x_i + Σ_j W_ij clip(x_j − x_i, τ_i), clip(z, τ) =
  z·min(1, τ/‖z‖). τ_i is --clip-radius, or adaptively as in the paper: the neighbours are sorted by ‖x_j − x_i‖
  and τ_i is the distance below which lies all but a weight δ_i of them, δ_i the `trim` largest weights W_ij
  (the weight at most `trim` attackers could hold), so the farthest δ_i of the weight is clipped.

Each returns the combined vector and the neighbours it cut: those whose difference was clipped, or whose values
were dropped in most coordinates.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

AGGREGATORS = ("mean", "trimmed-mean", "median", "clipped-gossip")


@dataclass(frozen=True)
class Robust:
    """A run's attackers and defence (from --byzantine, --attack, --attack-scale, --aggregator, --trim,
    --clip-radius)."""

    byzantine: frozenset[int]
    attack: str = "sign-flip"
    scale: float = 1.0
    aggregator: str = "mean"
    trim: int = 1
    clip_radius: float | None = None
    #: What attackers remember between rounds (ALIE: what they heard; stale: their first message).
    memory: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def active(self) -> bool:
        return bool(self.byzantine) or self.aggregator != "mean"


def _cut_most(stack: torch.Tensor, kept: torch.Tensor, order: list[int]) -> list[int]:
    """Neighbours (rows 1.. of `stack`) whose values were dropped in more than half of the coordinates."""
    dropped = (~kept).float().mean(dim=1)
    return [order[k] for k in range(1, len(order)) if float(dropped[k]) > 0.5]


def trimmed_mean(own: torch.Tensor, received: dict[int, torch.Tensor], trim: int) -> tuple[torch.Tensor, list[int]]:
    order = [-1, *sorted(received)]
    stack = torch.stack([own, *(received[j] for j in order[1:])])
    n = len(order)
    if n < 2 * trim + 1 or trim == 0:
        return stack.mean(0), []
    ranks = stack.argsort(dim=0).argsort(dim=0)
    kept = (ranks >= trim) & (ranks < n - trim)
    out = (stack * kept).sum(0) / (n - 2 * trim)
    return out, _cut_most(stack, kept, order)


def median(own: torch.Tensor, received: dict[int, torch.Tensor]) -> tuple[torch.Tensor, list[int]]:
    order = [-1, *sorted(received)]
    stack = torch.stack([own, *(received[j] for j in order[1:])])
    out = stack.median(dim=0).values if len(order) % 2 else stack.sort(dim=0).values[
        len(order) // 2 - 1: len(order) // 2 + 1].mean(0)
    return out, []


def clipped_gossip(own: torch.Tensor, received: dict[int, torch.Tensor], row: list[tuple[int, float]],
                   peer: int, trim: int, radius: float | None) -> tuple[torch.Tensor, list[int]]:
    weights = {j: w for j, w in row if j != peer}
    diffs = {j: received[j] - own for j in sorted(received) if j in weights}
    norms = {j: float(d.norm()) for j, d in diffs.items()}
    tau = radius if radius is not None else adaptive_radius(norms, weights, trim)
    out = own.clone()
    cut = []
    for j, d in diffs.items():
        factor = min(1.0, tau / norms[j]) if norms[j] > 0 else 1.0
        if factor < 1.0:
            cut.append(j)
        out.add_(d, alpha=weights[j] * factor)
    return out, cut


def adaptive_radius(norms: dict[int, float], weights: dict[int, float], trim: int) -> float:
    """The paper's choice: clip the farthest neighbours holding weight δ = the `trim` largest weights."""
    if not norms:
        return 0.0
    delta = sum(sorted(weights[j] for j in norms)[::-1][:trim])
    far_first = sorted(norms, key=lambda j: -norms[j])
    mass = 0.0
    for j in far_first:
        mass += weights[j]
        if mass > delta + 1e-12:
            return norms[j]
    return 0.0


def aggregate(robust: Robust, peer: int, own: torch.Tensor, received: dict[int, torch.Tensor],
              row: list[tuple[int, float]]) -> tuple[torch.Tensor, list[int]]:
    """Peer's combination of its own vector and its neighbours' under the run's aggregator."""
    if robust.aggregator == "trimmed-mean":
        return trimmed_mean(own, received, robust.trim)
    if robust.aggregator == "median":
        return median(own, received)
    if robust.aggregator == "clipped-gossip":
        return clipped_gossip(own, received, row, peer, robust.trim, robust.clip_radius)
    acc = torch.zeros_like(own)
    for j, w in row:
        acc.add_(received[j] if j in received else own, alpha=w)
    return acc, []
