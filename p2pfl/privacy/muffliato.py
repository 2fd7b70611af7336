"""Muffliato (Cyffers, Even, Bellet, Massoulié, "Muffliato: Peer-to-Peer Privacy Amplification for Decentralized
Optimization and Averaging", NeurIPS 2022): local Gaussian noise, then gossip, accounted as pairwise network DP.
This module holds the mechanism's noise and its ledger; the scheme `--gossip muffliato` that runs them is
p2pfl.gossip.schemes.muffliato (where the registry finds the built-in schemes).

`--gossip muffliato`. Each active peer adds ξ_i ~ N(0, σ²I) (σ = --muffliato-noise, drawn from its own stream
(seed, peer, "muffliato/<round>")) to the vector it would mix, x_i − ηg_i (the learners hand x½ itself), keeps the
noisy vector as its own and mixes it by the round's W, --gossip-steps S times (Muffliato-GD: an SGD step, noise,
then S gossip steps; the noise is added once a round, the S − 1 repeats are pure gossip). With --muffliato-once the
noise is added only the first time a peer takes part (the paper's averaging, Algorithm 1: one noisy value, then
every round's gossip steps), which `--algorithm consensus` runs.

The ledger (`PairwiseLedger`) is the paper's pairwise network Rényi DP (its Theorem 1 for averaging on a fixed W,
stated here for the run's own sequence of W): peer v observes, at every gossip step s, the messages of its
in-neighbours w, each (P_s x̃)_w with P_s = W_s ⋯ W_1 the product of the steps since the noise was added (P_0 = I).
That message is a Gaussian mechanism on u's value with sensitivity |(P_s)_wu|·Δ and noise variance σ²‖(P_s)_w‖², so
by composition over what v observes

    ρ_{u→v} = Δ²/(2σ²) · Σ_s Σ_{w ∈ N_s(v), w ≠ v} (P_s)_wu² / ‖(P_s)_w‖²,        ε_{u→v}(α) = α·ρ_{u→v},

Δ = --muffliato-sensitivity, the L2 sensitivity of a peer's vector to its private data (for clipped gradients,
η times the clipping bound's sensitivity). Since v's whole view is a function of the noisy values x̃, ρ_{u→v} is also
at most Δ²/(2σ²), local DP's, which caps each noise injection's sum (the paper's code clips likewise). Without
--muffliato-once the rounds compose, each round's fresh noise against that round's S steps (the paper's
Muffliato-GD composes T such averaging steps). ε at --muffliato-delta is p2pfl.privacy.gaussian.epsilon_at.

Records: every round `muffliato_eps_max` and `muffliato_eps_mean` over the ordered pairs u ≠ v (cumulative, at δ);
summary.json adds the local-DP ε of the same noise (`muffliato_ldp_eps`), ε by graph distance
(`muffliato_eps_by_distance`, [distance, mean, max] on the run's topology graph) and the matrix's file; the full
K × K matrix of ε_{u→v} (row u, column v) is `muffliato_eps.npy` in the run folder. The ledger is computed from the
schedule's networks (link failures, churn and participation included) on rank 0 in O(S·K³) a round, and replayed
from round 1 after --resume; a message rejected as non-finite (a fault) still counts as observed.
"""
from __future__ import annotations

import networkx as nx
import numpy as np
import torch

from p2pfl.seeding import torch_generator

#: The run folder's file of the pairwise ε matrix (row u, column v: ε_{u→v}).
MATRIX_FILE = "muffliato_eps.npy"
#: The state key of a peer that has added its noise (--muffliato-once).
NOISED = "muffliato_noised"


def noise(seed: int, peer: int, round: int, like: torch.Tensor, sigma: float) -> torch.Tensor:
    """ξ ~ N(0, σ²I) shaped and typed like `like`, from `peer`'s stream (seed, peer, "muffliato/<round>")."""
    gen = torch_generator(seed, peer, f"muffliato/{round}", like.device)
    return torch.randn(like.shape, generator=gen, dtype=like.dtype, device=like.device) * sigma


class PairwiseLedger:
    """ρ_{u→v} of the module docstring, accumulated step by step: `inject` when the peers add fresh noise, `step`
    for every gossip step (its W and who hears whom), `rho` the totals (row u, column v; the diagonal is 0)."""

    def __init__(self, n: int, scale: float) -> None:
        self.n, self.scale = n, scale  # scale: Δ²/(2σ²), local DP's ρ of one injection
        self.closed = np.zeros((n, n))  # the injections before the current one, each capped at `scale`
        self.current = np.zeros((n, n))  # the current injection's sum so far
        self.product: np.ndarray | None = None  # P_s since the current injection

    def inject(self) -> None:
        """Fresh noise: the current injection's sum is closed (capped at local DP's) and P restarts at I."""
        self.closed += np.minimum(self.current, self.scale)
        self.current = np.zeros((self.n, self.n))
        self.product = np.eye(self.n)

    def step(self, W: np.ndarray, hears: np.ndarray) -> None:
        """One gossip step: v observes (P x̃)_w from each w with hears[v, w] (w ≠ v), then P ← W P."""
        assert self.product is not None, "a gossip step before any noise"
        squared = self.product ** 2
        norms = squared.sum(axis=1)
        share = np.divide(squared, norms[:, None], out=np.zeros_like(squared), where=norms[:, None] > 0)
        observed = np.array(hears, dtype=np.float64)
        np.fill_diagonal(observed, 0.0)
        self.current += self.scale * (observed @ share).T  # [u, v] = Σ_w hears[v, w] share[w, u]
        self.product = W @ self.product

    @property
    def rho(self) -> np.ndarray:
        """ρ_{u→v} so far (row u, column v), each injection capped at local DP's."""
        total = self.closed + np.minimum(self.current, self.scale)
        np.fill_diagonal(total, 0.0)
        return total


def off_diagonal(matrix: np.ndarray) -> np.ndarray:
    """The entries u ≠ v of a K × K matrix, flat."""
    return matrix[~np.eye(matrix.shape[0], dtype=bool)]


def by_distance(eps: np.ndarray, graph: nx.Graph | None) -> list[list[float]]:
    """[d, mean, max] of ε_{u→v} over the ordered pairs at hop distance d ≥ 1 in `graph` (pairs it does not join,
    and a graph that is not the peers', are left out)."""
    n = eps.shape[0]
    if graph is None or set(graph.nodes) != set(range(n)):
        return []
    groups: dict[int, list[float]] = {}
    for u, lengths in nx.all_pairs_shortest_path_length(graph):
        for v, d in lengths.items():
            if d > 0:
                groups.setdefault(int(d), []).append(float(eps[u, v]))
    return [[d, float(np.mean(values)), float(np.max(values))] for d, values in sorted(groups.items())]
