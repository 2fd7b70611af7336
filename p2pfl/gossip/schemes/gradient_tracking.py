"""Gradient tracking (Nedić et al. 2017; Koloskova et al. 2021): X⁺ = W(X − ηY), Y⁺ = WY + G⁺ − G, Y₀ = G₀.

The tracker's correction G⁺ − G needs the gradient at the mixed model, so a peer keeps WY ("wy") and its last
gradient ("g") and completes Y at the start of its next round (Y = WY + G − g). Both vectors mix by the weights of
the round's surviving network: the second exchange runs over the network the first one left (a link rejected for x
is failed for y too). Exact only under a doubly stochastic W."""
from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch

from p2pfl.gossip.mix import Gossip, Mixed
from p2pfl.gossip.rules import Rule
from p2pfl.gossip.schemes import SCHEMES
from p2pfl.gossip.schemes.base import DOUBLY_STOCHASTIC, Scheme, State
from p2pfl.network.schedule import RoundNetwork


@SCHEMES.register("gradient-tracking")
class GradientTracking(Scheme):
    """Two exchanges a round: x − ηy, then the tracker y."""

    capabilities: ClassVar[frozenset[str]] = frozenset({DOUBLY_STOCHASTIC})

    def round(self, gossip: Gossip, x: dict[int, torch.Tensor], g: dict[int, torch.Tensor], lr: float,
              state: dict[int, State], net: RoundNetwork, round: int, sizes: Sequence[float] | None = None) -> Mixed:
        y = {}
        for p in x:
            s = state[p]
            y[p] = g[p].clone() if "wy" not in s else s["wy"] + g[p] - s["g"]
        mixed = gossip.combine({p: x[p] - lr * y[p] for p in x}, net, round, Rule(sizes))
        tracked = gossip.combine(y, mixed.net, round, Rule(sizes))
        for p in x:
            state[p]["wy"], state[p]["g"] = tracked.vectors[p], g[p].clone()
        return Mixed(mixed.vectors, tracked.net, mixed.events + tracked.events)
