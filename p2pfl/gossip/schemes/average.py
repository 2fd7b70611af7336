"""D-PSGD (Lian et al. 2017): X⁺ = W(X − ηG), the network's plain W-weighted mix of the peers' updated models; the
default, and the only scheme a method may run as its own Gossip.mix (the server's hops, Byzantine peers and robust
aggregators apply there) and --mode async runs. With --gossip-steps S: X⁺ = W^S(X − ηG)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch

from p2pfl.gossip.mix import Gossip, Mixed
from p2pfl.gossip.rules import Rule
from p2pfl.gossip.schemes import SCHEMES
from p2pfl.gossip.schemes.base import COMPRESSIBLE, MULTI_STEP, PLAIN_MIX, MultiStep, State
from p2pfl.network.schedule import RoundNetwork


@SCHEMES.register("average")
class Average(MultiStep):
    """x⁺ = Σ_j W_ij (x_j − ηg_j), through --compress's codec when one is set (no error feedback)."""

    needs: ClassVar[frozenset[str]] = frozenset()
    capabilities: ClassVar[frozenset[str]] = frozenset({PLAIN_MIX, COMPRESSIBLE, MULTI_STEP})

    def round(self, gossip: Gossip, x: dict[int, torch.Tensor], g: dict[int, torch.Tensor], lr: float,
              state: dict[int, State], net: RoundNetwork, round: int, sizes: Sequence[float] | None = None) -> Mixed:
        return gossip.combine({p: x[p] - lr * g[p] for p in x}, net, round, Rule(sizes), gossip.compressor)
