"""D² (Tang et al. 2018): send 2x − x⁻ − η(g − g⁻) (the first round x − ηg) and mix by W; a peer keeps its last
model and gradient ("x", "g").

D² converges only when W is symmetric with λ_min(W) >= −1/3: any other network is refused before training
(`check_weights`, every round's W), naming exact diffusion, which runs there. An even ring with Metropolis weights
sits exactly at −1/3 and must run, so the bound is relaxed by the eigensolver's rounding."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
import torch

from p2pfl.gossip.mix import Gossip, Mixed
from p2pfl.gossip.rules import Rule
from p2pfl.gossip.schemes import SCHEMES
from p2pfl.gossip.schemes.base import Scheme, State
from p2pfl.network.schedule import RoundNetwork

if TYPE_CHECKING:
    import networkx as nx

    from p2pfl.network import NetworkSchedule

D2_LAMBDA_MIN = -1.0 / 3.0
D2_TOLERANCE = 1e-9


class Diffusion(Scheme):
    """D²'s round, mixed by `rule` (exact diffusion: W̃ = (W + I)/2)."""

    def rule(self, sizes: Sequence[float] | None) -> Rule:
        return Rule(sizes)

    def round(self, gossip: Gossip, x: dict[int, torch.Tensor], g: dict[int, torch.Tensor], lr: float,
              state: dict[int, State], net: RoundNetwork, round: int, sizes: Sequence[float] | None = None) -> Mixed:
        sent = {}
        for p in x:
            s = state[p]
            sent[p] = x[p] - lr * g[p] if "x" not in s else 2 * x[p] - s["x"] - lr * (g[p] - s["g"])
        mixed = gossip.combine(sent, net, round, self.rule(sizes))
        for p in x:
            state[p]["x"], state[p]["g"] = x[p].clone(), g[p].clone()
        return mixed


def lambda_min(W: np.ndarray | sp.spmatrix) -> float:
    """The smallest eigenvalue of W (its real part: row-stochastic weights need not be symmetric)."""
    dense = W.toarray() if sp.issparse(W) else np.asarray(W)
    return float(np.min(np.linalg.eigvals(dense).real))


def asymmetry(W: np.ndarray | sp.spmatrix) -> float:
    """max |W_ij − W_ji|: 0 for a symmetric W."""
    diff = W - W.T
    if sp.issparse(diff):
        return float(abs(diff).max()) if diff.nnz else 0.0
    return float(np.max(np.abs(diff), initial=0.0))


def _key(W: np.ndarray | sp.spmatrix) -> bytes:
    if sp.issparse(W):
        return W.indptr.tobytes() + W.indices.tobytes() + W.data.tobytes()
    return np.asarray(W).tobytes()


@SCHEMES.register("d2")
class D2(Diffusion):
    """D² on a symmetric W with λ_min(W) >= −1/3."""

    @classmethod
    def check_network(cls, schedule: NetworkSchedule, graph: nx.Graph, rounds: int) -> None:
        """Every round's W (a static network's is one array: checked once; a dynamic one has none)."""
        static = [schedule.static_weights] if schedule.kind == "static" else []
        cls.check_weights([*static, *(schedule.at(t).W for t in range(1, rounds + 1))])

    @classmethod
    def check_weights(cls, weights: Sequence[np.ndarray | sp.spmatrix]) -> None:
        """Refuse a W (any round's) with λ_min < −1/3 or not symmetric (D² assumes W = Wᵀ; on one-way links its
        iteration can grow without bound): one line naming exact diffusion."""
        for W in {_key(W): W for W in weights}.values():  # a changing network repeats its Ws: each checked once
            low = lambda_min(W)
            if low < D2_LAMBDA_MIN - D2_TOLERANCE:
                raise ValueError(f"--gossip d2: needs λ_min(W) >= -1/3, this network's W has {low:.4f}; use --gossip "
                                 "exact-diffusion (W̃ = (W + I)/2) instead")
            skew = asymmetry(W)
            if skew > D2_TOLERANCE:
                raise ValueError(f"--gossip d2: needs a symmetric W, this network's is not (max |W_ij - W_ji| = "
                                 f"{skew:.4g}: one-way links or weights); use --gossip exact-diffusion instead")
