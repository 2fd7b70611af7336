"""clipped-gossip (He, Karimireddy and Jaggi, 2022): x_i + Σ_j W_ij clip(x_j − x_i, τ_i), clip(z, τ) =
z·min(1, τ/‖z‖). τ_i is --clip-radius, or adaptively as in the paper: the neighbours' weight farther than τ_i is at
most δ_i, the `trim` largest weights W_ij (the weight at most --trim attackers could hold). Exactly: τ_i = the
smallest of the neighbours' distances d_k = ‖x_k − x_i‖ such that the weight of the neighbours strictly farther
than d_k is at most δ_i. So only the farthest δ_i of the weight is clipped (with equal weights: τ_i is the distance
of the (trim+1)-th farthest neighbour, the published code's choice for one attacker), and τ_i is never below the
nearest neighbour's distance: a peer with m ≤ trim neighbours clips all but its nearest (one neighbour: nothing
clipped, its step is the gossip step). Without that floor the smallest τ meeting the weight condition would be 0
whenever the whole neighbourhood weighs at most δ_i, and a leaf of a star or tree would discard its only neighbour
and never move. It cuts the neighbours whose difference was clipped."""
from __future__ import annotations

import torch

from p2pfl.byzantine.aggregators import AGGREGATORS, Aggregator
from p2pfl.byzantine.robust import Robust, Scratch
from p2pfl.options import opt


@AGGREGATORS.register("clipped-gossip")
class ClippedGossip(Aggregator):
    """The gossip step with every neighbour's difference clipped to τ_i."""

    paper = "He, Karimireddy and Jaggi 2022"

    class Options:
        """A fixed τ instead of the paper's adaptive one."""

        clip_radius: float | None = opt(None, "fixed clipping radius of clipped-gossip (default: the paper's "
                                              "adaptive choice)", section="byzantine", bounds="> 0")

    @classmethod
    def aggregate(cls, robust: Robust, peer: int, own: torch.Tensor, received: dict[int, torch.Tensor],
                  row: list[tuple[int, float]], scratch: Scratch | None) -> tuple[torch.Tensor, list[int]]:
        return clipped_gossip(own, received, row, peer, robust.trim, robust.options.get("clip_radius"))

    @classmethod
    def assumed(cls, robust: Robust, senders: int) -> int | None:
        """The adaptive radius clips at most senders − 1 neighbours (the nearest stays unclipped)."""
        return None if robust.options.get("clip_radius") is not None else max(senders - 1, 0)


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
