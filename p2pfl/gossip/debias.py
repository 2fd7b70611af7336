"""A --gossip scheme's round for peers that hold their models, not push-sum's numerators.

The learners (p2pfl.algorithms.gossip_learner) and consensus keep in each peer's model what the peer trains,
evaluates and checkpoints: under push-sum the de-biased z = x/w. At communicate time the numerator is rebuilt as
x = w·z (w in the scheme state, checkpointed), `p2pfl.gossip.schemes.step` mixes [x − ηG, w] column-stochastically,
and the peer is left holding z⁺ = x⁺/w⁺. So Σ_i w_i z_i = Σ_i x_i is what push-sum conserves (to rounding), while
the network average every scheme reports stays the mean of the models the peers hold, the z_i. Every other scheme's
models are its iterates, passed through unchanged.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from p2pfl.gossip.mix import Gossip, Mixed
from p2pfl.gossip.schemes import SchemeRound, model, step
from p2pfl.network.schedule import RoundNetwork


def weight(state: dict[str, torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    """Push-sum's weight w of a peer (1 before its first round), as a one-element tensor like `like`."""
    return state["w"] if "w" in state else torch.ones(1, dtype=like.dtype, device=like.device)


def step_models(scheme: str, gossip: Gossip, work: SchemeRound, state: dict[int, dict[str, torch.Tensor]],
                net: RoundNetwork, round: int, sizes: Sequence[float] | None = None) -> Mixed:
    """`step` where `work.x` holds the peers' models (z under push-sum) and so do the mixed vectors returned."""
    if scheme != "push-sum":
        return step(scheme, gossip, work, state, net, round, sizes)
    numerators = {p: weight(state[p], z) * z for p, z in work.x.items()}
    mixed = step(scheme, gossip, SchemeRound(numerators, work.g, work.lr, work.momentum), state, net, round, sizes)
    return Mixed({p: model(x, state[p]) for p, x in mixed.vectors.items()}, mixed.net, mixed.events)


__all__ = ["step_models", "weight"]
