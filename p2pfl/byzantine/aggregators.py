"""How an honest peer combines its own vector with what its neighbours sent (SPEC §2 replaced by a robust rule).

- mean: Σ_j W_ij x_j, the gossip step (not robust);
- trimmed-mean: coordinate-wise, the t largest and t smallest of the n values of the closed neighbourhood are
  dropped and the rest averaged, t = min(trim, (n − 1)//2): a neighbourhood too small for `trim` per side keeps
  the middle value (n odd) or two (n even), i.e. the coordinate-wise median, not the plain mean (as the
  published ClippedGossip code lowers its trimmed mean's b until n − 2b > 0);
- median: the coordinate-wise median of the closed neighbourhood;
- clipped-gossip (He, Karimireddy and Jaggi, 2022): x_i + Σ_j W_ij clip(x_j − x_i, τ_i), clip(z, τ) =
  z·min(1, τ/‖z‖). τ_i is --clip-radius, or adaptively as in the paper: the neighbours' weight farther than τ_i
  is at most δ_i, the `trim` largest weights W_ij (the weight at most `trim` attackers could hold). Exactly:
  τ_i = the smallest of the neighbours' distances d_k = ‖x_k − x_i‖ such that the weight of the neighbours
  strictly farther than d_k is at most δ_i. So only the farthest δ_i of the weight is clipped (with equal
  weights: τ_i is the distance of the (trim+1)-th farthest neighbour, the published code's choice for one
  attacker), and τ_i is never below the nearest neighbour's distance: a peer with m ≤ trim neighbours clips all
  but its nearest (one neighbour: nothing clipped, its step is the gossip step). Without that floor the
  smallest τ meeting the weight condition would be 0 whenever the whole neighbourhood weighs at most δ_i, and a
  leaf of a star or tree would discard its only neighbour and never move.

Each returns the combined vector and the neighbours it cut: those whose difference was clipped, or whose values
were dropped in most coordinates (counted on a regular sample of at most 2^20 coordinates). `lowered_trim`
says when a neighbourhood made an aggregator assume fewer attackers than `trim` (recorded per round). The
trimmed mean and the median select by elementwise min/max in reused scratch vectors, never by a sort.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

AGGREGATORS = ("mean", "trimmed-mean", "median", "clipped-gossip")


@dataclass(frozen=True)
class Robust:
    """A run's attackers and defence (from --byzantine, --attack, --attack-scale, --aggregator, --trim,
    --clip-radius; `peers`, the network's size, is ALIE's n)."""

    byzantine: frozenset[int]
    attack: str = "sign-flip"
    scale: float = 1.0
    aggregator: str = "mean"
    trim: int = 1
    clip_radius: float | None = None
    peers: int = 0

    @property
    def active(self) -> bool:
        return bool(self.byzantine) or self.aggregator != "mean"


class Scratch:
    """Scratch vectors reused across rounds, by (slot, shape, dtype, device): a fresh 45 MB buffer costs a CPU
    more in page faults than the arithmetic done in it. Held: 2·trim + 2 model-sized vectors while robust. One
    per run (the gossip pipeline's); it holds no state, only room."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[Any, ...], torch.Tensor] = {}

    def __call__(self, slot: str, like: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        key = (slot, like.shape, dtype or like.dtype, like.device)
        if key not in self._buffers:
            self._buffers[key] = torch.empty_like(like, dtype=dtype or like.dtype)
        return self._buffers[key]


def _extremes(rows: list[torch.Tensor], k: int, largest: bool, scratch: Scratch) -> list[torch.Tensor]:
    """The k smallest (or largest) values of each coordinate over `rows`, kept ordered by insertion with
    elementwise min/max into scratch buffers: O(n·k) passes over the vector, no sort and no index tensor
    (a sort along the short neighbour axis costs ten times the gossip mean on a CPU)."""
    inner, outer = (torch.maximum, torch.minimum) if largest else (torch.minimum, torch.maximum)
    side = "high" if largest else "low"
    keep = [scratch(f"{side}{i}", rows[0]) for i in range(k)]
    if k == 1:
        inner(rows[0], rows[1], out=keep[0])
        for row in rows[2:]:
            inner(keep[0], row, out=keep[0])
        return keep
    carry, spare = scratch(f"{side}-carry", rows[0]), scratch(f"{side}-spare", rows[0])
    for filled, row in enumerate(rows):
        x = row
        for i in range(min(filled, k)):
            inner(keep[i], x, out=spare)
            outer(keep[i], x, out=carry)
            keep[i], spare = spare, keep[i]
            x = carry
        if filled < k:
            keep[filled].copy_(x)
        carry, spare = spare, carry
    return keep


def trimmed_mean(own: torch.Tensor, received: dict[int, torch.Tensor], trim: int, scratch: Scratch | None = None
                 ) -> tuple[torch.Tensor, list[int]]:
    """The coordinate-wise mean of the closed neighbourhood without its t = min(trim, (n − 1)//2) largest and
    smallest values per coordinate, and the neighbours dropped in most coordinates."""
    scratch = scratch or Scratch()
    order = [-1, *sorted(received)]
    rows = [own, *(received[j] for j in order[1:])]
    n = len(rows)
    trim = min(trim, (n - 1) // 2)
    out = torch.add(own, rows[1], out=torch.empty_like(own)) if n > 1 else own.clone()
    for row in rows[2:]:
        out.add_(row)
    if trim == 0:
        return out.div_(n), []
    low, high = _extremes(rows, trim, False, scratch), _extremes(rows, trim, True, scratch)
    for v in (*low, *high):
        out.sub_(v)
    out.div_(n - 2 * trim)
    return out, _trimmed_most(order, rows, low[-1], high[-1], scratch)


def _trimmed_most(order: list[int], rows: list[torch.Tensor], low: torch.Tensor, high: torch.Tensor,
                  scratch: Scratch) -> list[int]:
    """Neighbours whose value is at or beyond the trim-th smallest or largest (so dropped; exact for distinct
    values) in more than half of the coordinates, counted on a regular sample of at most 2^20 coordinates."""
    step = -(-low.numel() // (1 << 20))
    low, high = low[::step], high[::step]
    below, above = scratch("below", low, torch.bool), scratch("above", low, torch.bool)
    cut = []
    for j, row in zip(order[1:], rows[1:]):
        torch.le(row[::step], low, out=below)
        torch.ge(row[::step], high, out=above)
        if int(below.logical_or_(above).count_nonzero()) * 2 > low.numel():
            cut.append(j)
    return cut


def median(own: torch.Tensor, received: dict[int, torch.Tensor], scratch: Scratch | None = None
           ) -> tuple[torch.Tensor, list[int]]:
    """The coordinate-wise median: the trimmed mean that keeps the middle one (odd) or two (even) values."""
    out, _ = trimmed_mean(own, received, (len(received)) // 2, scratch)
    return out, []


def clipped_gossip(own: torch.Tensor, received: dict[int, torch.Tensor], row: list[tuple[int, float]],
                   peer: int, trim: int, radius: float | None) -> tuple[torch.Tensor, list[int]]:
    weights = {j: w for j, w in row if j != peer}
    senders = [j for j in sorted(received) if j in weights]
    buffer = torch.empty_like(own)
    norms = {j: float(torch.sub(received[j], own, out=buffer).norm()) for j in senders}
    tau = radius if radius is not None else adaptive_radius(norms, weights, trim)
    # x_i + Σ_j w_j f_j (x_j − x_i) = (1 − Σ_j w_j f_j) x_i + Σ_j w_j f_j x_j: no difference vector is kept.
    factors = {j: min(1.0, tau / norms[j]) if norms[j] > 0 else 1.0 for j in senders}
    out = own.mul(1.0 - sum(weights[j] * factors[j] for j in senders))
    for j in senders:
        out.add_(received[j], alpha=weights[j] * factors[j])
    return out, [j for j in senders if factors[j] < 1.0]


def adaptive_radius(norms: dict[int, float], weights: dict[int, float], trim: int) -> float:
    """The paper's choice (module docstring): the smallest neighbour distance beyond which lies at most the
    weight δ of the `trim` heaviest neighbours; never below the nearest neighbour's distance."""
    if not norms:
        return 0.0
    delta = sum(sorted((weights[j] for j in norms), reverse=True)[:trim])
    tau, farther = 0.0, 0.0
    for j in sorted(norms, key=lambda j: -norms[j]):
        if farther > delta + 1e-12:
            break
        tau = norms[j]
        farther += weights[j]
    return tau


def lowered_trim(robust: Robust, senders: int) -> int | None:
    """The number of attackers the run's aggregator assumed in a neighbourhood of `senders` messages when that
    is fewer than --trim (else None): trimmed-mean trims min(trim, senders // 2) per side (own value included),
    adaptive clipped-gossip clips at most senders − 1 neighbours (the nearest stays unclipped)."""
    if robust.aggregator == "trimmed-mean":
        allowed = senders // 2
    elif robust.aggregator == "clipped-gossip" and robust.clip_radius is None:
        allowed = max(senders - 1, 0)
    else:
        return None
    return allowed if allowed < robust.trim else None


def aggregate(robust: Robust, peer: int, own: torch.Tensor, received: dict[int, torch.Tensor],
              row: list[tuple[int, float]], scratch: Scratch | None = None) -> tuple[torch.Tensor, list[int]]:
    """Peer's combination of its own vector and its neighbours' under the run's aggregator (`scratch`: room
    reused across calls)."""
    if robust.aggregator == "trimmed-mean":
        return trimmed_mean(own, received, robust.trim, scratch)
    if robust.aggregator == "median":
        return median(own, received, scratch)
    if robust.aggregator == "clipped-gossip":
        return clipped_gossip(own, received, row, peer, robust.trim, robust.clip_radius)
    acc = torch.zeros_like(own)
    for j, w in row:
        acc.add_(received[j] if j in received else own, alpha=w)
    return acc, []
