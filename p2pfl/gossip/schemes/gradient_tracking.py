"""Gradient tracking (Nedić et al. 2017; Koloskova et al. 2021): X⁺ = W(X − ηY), Y⁺ = WY + G⁺ − G, Y₀ = G₀.

The tracker's correction G⁺ − G needs the gradient at the mixed model, so a peer keeps WY ("wy") and its last
gradient ("g") and completes Y at the start of its next round (Y = WY + G − g). Both exchanges start before either
is waited on (they travel together, and the ranks agree once a round on what they rejected); both vectors mix by
the weights of the round's surviving network: y mixes over the network x's exchange left (a link rejected for x is
failed for y too; p2pfl.gossip.exchanges). Exact only under a doubly stochastic W."""
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
        exchanges = gossip.exchanges(net, round)
        models = exchanges.start({p: x[p] - lr * y[p] for p in x}, rule=Rule(sizes))
        trackers = exchanges.start(y, rule=Rule(sizes))  # over the links x's exchange leaves
        mixed, tracked = models.result().combined, trackers.result().combined
        for p in x:
            state[p]["wy"], state[p]["g"] = tracked[p], g[p].clone()
        assert exchanges.net is not None
        return Mixed(mixed, exchanges.net, exchanges.events)
