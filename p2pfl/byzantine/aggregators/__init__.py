"""How an honest peer combines its own vector with what its neighbours sent (SPEC §2, replaced by a robust rule
under attack): one `Aggregator` a file, registered in `AGGREGATORS` and chosen by --aggregator (mean, trimmed-mean,
median, clipped-gossip).

Each returns the combined vector and the neighbours it cut: those whose difference was clipped, or whose values
were dropped in most coordinates. `lowered_trim` says when a neighbourhood made an aggregator assume fewer attackers
than --trim (recorded per round)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from p2pfl.registry import Component, Registry

if TYPE_CHECKING:
    from p2pfl.byzantine.robust import Robust, Scratch

#: The aggregators, by their --aggregator name.
AGGREGATORS: Registry[Any] = Registry("aggregator", option="aggregator", package="p2pfl.byzantine.aggregators")


class Aggregator(Component):
    """An honest peer's combination of its closed neighbourhood. Capability "linear": the plain W-weighted mean
    (no defence: gossip runs it as the plain rule, and --compress may encode its messages)."""

    @classmethod
    def aggregate(cls, robust: Robust, peer: int, own: torch.Tensor, received: dict[int, torch.Tensor],
                  row: list[tuple[int, float]], scratch: Scratch | None) -> tuple[torch.Tensor, list[int]]:
        """`peer`'s combined vector and the neighbours it cut (`row`: its row of W; `robust`: --trim and the
        aggregator's own options; `scratch`: room reused across calls)."""
        raise NotImplementedError

    @classmethod
    def assumed(cls, robust: Robust, senders: int) -> int | None:
        """How many attackers it can assume in a neighbourhood of `senders` messages (None: --trim, always)."""
        return None


def aggregate(robust: Robust, peer: int, own: torch.Tensor, received: dict[int, torch.Tensor],
              row: list[tuple[int, float]], scratch: Scratch | None = None) -> tuple[torch.Tensor, list[int]]:
    """Peer's combination of its own vector and its neighbours' under the run's aggregator (`scratch`: room
    reused across calls)."""
    return robust.defence.aggregate(robust, peer, own, received, row, scratch)


def lowered_trim(robust: Robust, senders: int) -> int | None:
    """The number of attackers the run's aggregator assumed in a neighbourhood of `senders` messages when that
    is fewer than --trim (else None)."""
    allowed = robust.defence.assumed(robust, senders)
    return allowed if allowed is not None and allowed < robust.trim else None
