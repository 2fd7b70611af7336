"""trimmed-mean: coordinate-wise, the t largest and t smallest of the n values of the closed neighbourhood are
dropped and the rest averaged, t = min(trim, (n − 1)//2): a neighbourhood too small for --trim per side keeps the
middle value (n odd) or two (n even), i.e. the coordinate-wise median, not the plain mean (as the published
ClippedGossip code lowers its trimmed mean's b until n − 2b > 0). It selects by elementwise min/max in reused
scratch vectors, never by a sort, and cuts the neighbours whose values were dropped in most coordinates (counted on
a regular sample of at most 2^20 coordinates)."""
from __future__ import annotations

import torch

from p2pfl.byzantine.aggregators import AGGREGATORS, Aggregator
from p2pfl.byzantine.robust import Robust, Scratch


@AGGREGATORS.register("trimmed-mean")
class TrimmedMean(Aggregator):
    """The coordinate-wise mean without the --trim largest and smallest values."""

    @classmethod
    def aggregate(cls, robust: Robust, peer: int, own: torch.Tensor, received: dict[int, torch.Tensor],
                  row: list[tuple[int, float]], scratch: Scratch | None) -> tuple[torch.Tensor, list[int]]:
        return trimmed_mean(own, received, robust.trim, scratch)

    @classmethod
    def assumed(cls, robust: Robust, senders: int) -> int | None:
        return senders // 2  # min(trim, senders // 2) per side, own value included


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
