"""Combine rules: how a receiver makes one vector of its own and what it kept from its neighbours. A rule is one
class: `combine` (the vector and the neighbours it cut), `suspect` (whether a result calls for checking the
messages behind it) and `events` (what else the round record says of a receiver's combination)."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from p2pfl.byzantine import Robust, Scratch, aggregate, lowered_trim
from p2pfl.gossip.checked import Events, finite
from p2pfl.network.schedule import RoundNetwork


def weighted_sum(own: torch.Tensor, received: dict[int, torch.Tensor], row: list[tuple[int, float]]) -> torch.Tensor:
    """Σ_j w_j x_j in the row's (ascending) order, x_j = own where j sent nothing (the peer itself): bitwise the
    same whichever ranks the peers sit on."""
    acc = torch.zeros_like(own)
    for j, w in row:
        acc.add_(received[j] if j in received else own, alpha=w)
    return acc


class Rule:
    """The interface; also the W-weighted mean x_i <- Σ_j W_ij x_j (with `sizes`, W_ij scaled by n_j and the row
    renormalised)."""

    def __init__(self, sizes: Sequence[float] | None = None) -> None:
        self.sizes = sizes

    def combine(self, peer: int, own: torch.Tensor, received: dict[int, torch.Tensor], net: RoundNetwork
                ) -> tuple[torch.Tensor, list[int]]:
        return weighted_sum(own, received, net.row(peer, self.sizes)), []

    def suspect(self, peer: int, result: torch.Tensor) -> bool:
        """Whether the messages behind `result` must be checked: any non-finite input makes a weighted sum (and
        every robust aggregator: the sum, min/max or norm) non-finite, so only such results are."""
        return not finite(result)

    def events(self, peer: int, kept: dict[int, torch.Tensor]) -> Events:
        """What the round record says of `peer`'s combination of `kept` (the messages left once the rejected
        ones are out) beyond what it cut: nothing here."""
        return Events()


class RobustRule(Rule):
    """--aggregator with --byzantine: honest peers combine with the run's robust aggregator (p2pfl.byzantine)
    and report where their neighbourhood lowered its trim; attackers keep their own vector and check what they
    heard."""

    def __init__(self, robust: Robust, sizes: Sequence[float] | None = None, scratch: Scratch | None = None) -> None:
        super().__init__(sizes)
        self.robust, self.scratch = robust, scratch or Scratch()

    def combine(self, peer: int, own: torch.Tensor, received: dict[int, torch.Tensor], net: RoundNetwork
                ) -> tuple[torch.Tensor, list[int]]:
        if peer in self.robust.byzantine:
            return own, []
        return aggregate(self.robust, peer, own, received, net.row(peer, self.sizes), self.scratch)

    def suspect(self, peer: int, result: torch.Tensor) -> bool:
        return peer in self.robust.byzantine or super().suspect(peer, result)

    def events(self, peer: int, kept: dict[int, torch.Tensor]) -> Events:
        trim = None if peer in self.robust.byzantine else lowered_trim(self.robust, len(kept))
        return Events(lowered=((peer, trim),)) if trim is not None else Events()
