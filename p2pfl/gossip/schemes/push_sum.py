"""Push-sum (Kempe et al. 2003; SGP, Assran et al. 2019): send [x − ηg, w]/(1 + out-degree), X⁺ = P(X − ηG),
w⁺ = Pw, w₀ = 1 (state "w").

Push-sum's x is the numerator; the model the peer trains and is measured by is z = x/w (`model`), and its G the
gradient at z. P is column-stochastic: a sender splits its mass evenly over itself and the out-links the round's
network carries (one-way links, failures, churn: the receivers it reaches), and a receiver adds what reaches it to
the share it kept, so Σ_i x_i and Σ_i w_i are transported exactly (x and w travel in one message of d + 1 values:
a link fails for both or neither). A message rejected after it was sent loses its mass.

The learners and consensus keep in each peer's model what the peer trains, evaluates and checkpoints: z. At
communicate time the numerator is rebuilt as x = w·z (`round_models`), mixed, and the peer is left holding
z⁺ = x⁺/w⁺. So Σ_i w_i z_i = Σ_i x_i is what push-sum conserves (to rounding), while the network average every scheme
reports stays the mean of the z_i. A returning peer does not take its neighbours' mix (--rejoin mix): it would
replace z while w stays, creating or destroying mass. Push-sum splits evenly: no --weight-by-data.

SGP as its published code runs it (facebookresearch/stochastic_gradient_push) is this scheme with one gossip step
per SGD step on `--topology sgp-exponential` (one peer a round, i -> i + 2^((t−1) mod τ)), Nesterov momentum kept
across rounds: `--gossip push-sum --topology sgp-exponential --optimizer sgd --momentum 0.9 --nesterov
--keep-optimizer` (docs/optimisers.md; tests/test_sgp_published.py). With --gossip-steps S (S = 2: the two-step
variant, not the published form), x and w are both mixed S times a round, X⁺ = P^S(X − ηG), w⁺ = P^S w, and the
peer holds z⁺ = x⁺/w⁺ (the numerator rebuilt from z once, before the first step)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from p2pfl.gossip.mix import Gossip, Mixed
from p2pfl.gossip.rules import Rule
from p2pfl.gossip.schemes import SCHEMES
from p2pfl.gossip.schemes.base import DEBIASED, MIXES_BY_W, MULTI_STEP, NO_REJOIN_MIX, MultiStep, State
from p2pfl.network.schedule import RoundNetwork
from p2pfl.options import Check


class PushSumRule(Rule):
    """Column-stochastic mixing: the share a peer kept plus every (pre-split) message that reached it, in ascending
    sender order (the same sum whichever ranks the peers sit on)."""

    linear = False  # its sum starts from the peer's own share (a clone), not from zero

    def combine(self, peer: int, own: torch.Tensor, received: dict[int, torch.Tensor], net: RoundNetwork
                ) -> tuple[torch.Tensor, list[int]]:
        acc = own.clone()
        for j in sorted(received):
            acc.add_(received[j])
        return acc, []


@SCHEMES.register("push-sum")
class PushSum(MultiStep):
    """Column-stochastic gossip of [x − ηg, w]; the peers hold z = x/w."""

    needs: ClassVar[frozenset[str]] = frozenset({MIXES_BY_W})
    capabilities: ClassVar[frozenset[str]] = frozenset({DEBIASED, NO_REJOIN_MIX, MULTI_STEP})

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        super().check(cfg, check)
        check(not cfg.weight_by_data, "weight_by_data", "--gossip push-sum splits each sender's mass evenly over its "
                                                        "out-links; run it without --weight-by-data")

    @staticmethod
    def weight(state: State, like: torch.Tensor) -> torch.Tensor:
        """A peer's weight w (1 before its first round), as a one-element tensor like `like`."""
        return state["w"] if "w" in state else torch.ones(1, dtype=like.dtype, device=like.device)

    def model(self, x: torch.Tensor, state: State) -> torch.Tensor:
        return x / state["w"] if "w" in state else x

    def numerator(self, z: torch.Tensor, state: State) -> torch.Tensor:
        return self.weight(state, z) * z

    def round(self, gossip: Gossip, x: dict[int, torch.Tensor], g: dict[int, torch.Tensor], lr: float,
              state: dict[int, State], net: RoundNetwork, round: int, sizes: Sequence[float] | None = None) -> Mixed:
        out = np.bincount(net.adjacency.indices, minlength=net.n_peers)  # A[i, j]: i hears from j, so column j
        # counts j's surviving out-links
        sent = {}
        for p in x:
            w = state[p].get("w", torch.ones(1, dtype=x[p].dtype, device=x[p].device))
            sent[p] = torch.cat([x[p] - lr * g[p], w]) / (1 + int(out[p]))
        mixed = gossip.combine(sent, net, round, PushSumRule())
        for p in x:
            state[p]["w"] = mixed.vectors[p][-1:].clone()
        return Mixed({p: v[:-1].clone() for p, v in mixed.vectors.items()}, mixed.net, mixed.events)

    def round_models(self, gossip: Gossip, z: Mapping[int, torch.Tensor], g: dict[int, torch.Tensor], lr: float,
                     state: dict[int, State], net: RoundNetwork, round: int,
                     sizes: Sequence[float] | None = None, steps: int = 1) -> Mixed:
        numerators = {p: self.numerator(v, state[p]) for p, v in z.items()}
        mixed = self.rounds(gossip, numerators, g, lr, state, net, round, sizes, steps)
        return Mixed({p: self.model(x, state[p]) for p, x in mixed.vectors.items()}, mixed.net, mixed.events)
