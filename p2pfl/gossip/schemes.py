"""Decentralised optimisers (SPEC §7): what a round does with the network besides plain weight averaging.

A scheme is a combine rule and a little state per peer on the gossip pipeline. One round of every scheme reads the
peers' models X (before their local update), their gradients G (the local update divided by −η: exactly the
gradient for one plain step), the state each peer keeps (a dict in its record, so checkpoints keep it) and the
round's network, and returns the mixed models, every vector sent through the checked exchange (bytes counted):

| scheme | sent | state |
|---|---|---|
| average | x − ηg (D-PSGD: X⁺ = W(X − ηG)) | — |
| gradient-tracking | x − ηy and y (X⁺ = W(X − ηY); Y⁺ = WY + G⁺ − G, Y₀ = G₀) | wy (WY of the last round), g |
| d2 | 2x − x⁻ − η(g − g⁻), the first round x − ηg | x⁻, g⁻ |
| exact-diffusion | as d2, mixed by W̃ = (W + I)/2 | x⁻, g⁻ |
| qgm | x − η(μm + g) (X⁺ = W X½; M⁺ = μM + (1 − μ)(X − X⁺)/η, M₀ = 0; μ = --momentum) | m |
| push-sum | [x − ηg, w]/(1 + out-degree) (X⁺ = P(X − ηG), w⁺ = Pw, w₀ = 1) | w |

Push-sum's x is the numerator; the model the peer trains and is measured by is z = x/w (`model`), and its G the
gradient at z. P is column-stochastic: a sender splits its mass evenly over itself and the out-links the round's
network carries (one-way links, failures, churn: the receivers it reaches), and a receiver adds what reaches it to
the share it kept, so Σ_i x_i and Σ_i w_i are transported exactly (x and w travel in one message of d + 1 values:
a link fails for both or neither). A message rejected after it was sent loses its mass.

With E > 1 local steps (the learners, and the quadratic problem's --local-steps) a scheme corrects the whole local
update as if it were one step: G = (x − x_E)/η, x the mixable state before the E steps, x_E after them. Under qgm
those E steps are plain SGD without momentum (--momentum is μ, applied once a round here: the peer sends
x − η(μm + G) = x_E − ημm); under push-sum they start from z = x/w and G = (z − z_E)/η.

The tracker's correction G⁺ − G needs the gradient at the mixed model, so a peer keeps WY and its last gradient
and completes Y at the start of its next round (Y = WY + G − g). Each uses the weights of the round's surviving
network: the second vector of gradient tracking mixes over the network the first one's exchange left (a link
rejected for x is failed for y too). A peer that sits a round out keeps its state as it was.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from p2pfl.gossip.mix import Gossip, Mixed
from p2pfl.gossip.rules import Rule
from p2pfl.network.schedule import RoundNetwork

#: The schemes the weight-mixing methods run (p2pfl.algorithms.gossip_learner: under qgm their local SGD steps run
#: without momentum, p2pfl.optim.local_momentum; under push-sum they hold z = x/w, p2pfl.gossip.debias) ...
LEARNER_SCHEMES = ("average", "gradient-tracking", "d2", "exact-diffusion", "qgm", "push-sum")
#: ... and every --gossip value (p2pfl.config reads them from here).
SCHEMES = LEARNER_SCHEMES
#: D² converges only when λ_min(W) >= −1/3 (Tang et al. 2018); an even ring with Metropolis weights sits exactly at
#: −1/3 and must run, so the bound is relaxed by the eigensolver's rounding.
D2_LAMBDA_MIN = -1.0 / 3.0
D2_TOLERANCE = 1e-9


class Lazy(Rule):
    """Exact diffusion's W̃ = (W + I)/2: x_i <- (x_i + Σ_j W_ij x_j) / 2."""

    def combine(self, peer: int, own: torch.Tensor, received: dict[int, torch.Tensor], net: RoundNetwork
                ) -> tuple[torch.Tensor, list[int]]:
        mixed, _ = super().combine(peer, own, received, net)
        return mixed.add_(own).mul_(0.5), []


class PushSum(Rule):
    """Column-stochastic mixing: the share a peer kept plus every (pre-split) message that reached it, in ascending
    sender order (the same sum whichever ranks the peers sit on)."""

    def combine(self, peer: int, own: torch.Tensor, received: dict[int, torch.Tensor], net: RoundNetwork
                ) -> tuple[torch.Tensor, list[int]]:
        acc = own.clone()
        for j in sorted(received):
            acc.add_(received[j])
        return acc, []


def model(x: torch.Tensor, state: dict[str, torch.Tensor]) -> torch.Tensor:
    """The model a peer holds: x, or push-sum's de-biased z = x/w."""
    return x / state["w"] if "w" in state else x


def lambda_min(W: np.ndarray) -> float:
    """The smallest eigenvalue of W (its real part: row-stochastic weights need not be symmetric)."""
    return float(np.min(np.linalg.eigvals(W).real))


def check_weights(scheme: str, weights: Sequence[np.ndarray]) -> None:
    """Refuse before training a d2 run whose W (any round's) has λ_min < −1/3: one line naming exact diffusion."""
    if scheme != "d2":
        return
    for W in {W.tobytes(): W for W in weights}.values():  # a changing network repeats its Ws: each checked once
        low = lambda_min(W)
        if low < D2_LAMBDA_MIN - D2_TOLERANCE:
            raise ValueError(f"--gossip d2: needs λ_min(W) >= -1/3, this network's W has {low:.4f}; use --gossip "
                             "exact-diffusion (W̃ = (W + I)/2) instead")


@dataclass
class SchemeRound:
    """A scheme's round: each local active peer's model (before its update) and gradient."""

    x: dict[int, torch.Tensor]
    g: dict[int, torch.Tensor]
    lr: float
    momentum: float = 0.0  # qgm's μ


def step(scheme: str, gossip: Gossip, work: SchemeRound, state: dict[int, dict[str, torch.Tensor]],
         net: RoundNetwork, round: int, sizes: Sequence[float] | None = None) -> Mixed:
    """One round of `scheme` for the local active peers of `work`: their mixed models, the network the exchanges
    left and their events. `state[p]` (the peer's record's dict) is updated in place."""
    x, g, lr = work.x, work.g, work.lr
    if scheme == "average":
        return gossip.combine({p: x[p] - lr * g[p] for p in x}, net, round, Rule(sizes))
    if scheme == "gradient-tracking":
        y = {}
        for p in x:
            s = state[p]
            y[p] = g[p].clone() if "wy" not in s else s["wy"] + g[p] - s["g"]
        mixed = gossip.combine({p: x[p] - lr * y[p] for p in x}, net, round, Rule(sizes))
        tracked = gossip.combine(y, mixed.net, round, Rule(sizes))
        for p in x:
            state[p]["wy"], state[p]["g"] = tracked.vectors[p], g[p].clone()
        return Mixed(mixed.vectors, tracked.net, mixed.events + tracked.events)
    if scheme in ("d2", "exact-diffusion"):
        sent = {}
        for p in x:
            s = state[p]
            sent[p] = x[p] - lr * g[p] if "x" not in s else 2 * x[p] - s["x"] - lr * (g[p] - s["g"])
        mixed = gossip.combine(sent, net, round, Lazy(sizes) if scheme == "exact-diffusion" else Rule(sizes))
        for p in x:
            state[p]["x"], state[p]["g"] = x[p].clone(), g[p].clone()
        return mixed
    if scheme == "qgm":
        mu = work.momentum
        m = {p: state[p].get("m", torch.zeros_like(x[p])) for p in x}
        mixed = gossip.combine({p: x[p] - lr * (mu * m[p] + g[p]) for p in x}, net, round, Rule(sizes))
        for p in x:
            state[p]["m"] = mu * m[p] + (1 - mu) * (x[p] - mixed.vectors[p]) / lr
        return mixed
    if scheme == "push-sum":
        out = net.adjacency.sum(axis=0)  # A[i, j]: i hears from j, so column j counts j's surviving out-links
        sent = {}
        for p in x:
            w = state[p].get("w", torch.ones(1, dtype=x[p].dtype, device=x[p].device))
            sent[p] = torch.cat([x[p] - lr * g[p], w]) / (1 + int(out[p]))
        mixed = gossip.combine(sent, net, round, PushSum())
        for p in x:
            state[p]["w"] = mixed.vectors[p][-1:].clone()
        return Mixed({p: v[:-1].clone() for p, v in mixed.vectors.items()}, mixed.net, mixed.events)
    raise ValueError(f"--gossip: unknown scheme {scheme!r}; allowed: {', '.join(SCHEMES)}")


__all__ = ["D2_LAMBDA_MIN", "D2_TOLERANCE", "LEARNER_SCHEMES", "Lazy", "PushSum", "SCHEMES", "SchemeRound",
           "check_weights", "lambda_min", "model", "step"]
