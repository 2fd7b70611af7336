"""Decor (Allouah, Koloskova, El Firdoussi, Jaggi, Guerraoui, "The Privacy Power of Correlated Noise in Decentralized
Learning", ICML 2024): pairwise noise that cancels over the network, plus small local noise, accounted by SecLDP.
This module holds the mechanism's noise and its accountant; the scheme `--gossip decor` that runs them is
p2pfl.gossip.schemes.decor (where the registry finds the built-in schemes).

`--gossip decor`. In round t every active peer i adds to the vector it mixes (x_i − ηg_i; the learners hand x½)

    n_i = ξ_i + Σ_{j ∈ N_t(i)} s_ij·v_{ij},   ξ_i ~ N(0, σ²I),  v_{ij} ~ N(0, σ_cor²I),  s_ij = +1 if i < j else −1,

σ = --decor-local-noise, σ_cor = --decor-noise, N_t(i) the peers active in round t that i hears from or that hear
from i (the round's links, both ways). v_{ij} is drawn from the stream both ends share, keyed by (seed, min(i, j),
max(i, j), "decor/<t>") (p2pfl.seeding.pair_generator): i adds it, j subtracts it, so Σ_i n_i = Σ_i ξ_i, the pairwise
part cancelling exactly up to rounding, wherever the peers sit. A peer keeps its noisy vector and mixes it by the
round's W; with a doubly stochastic W the network average moves by the local noise's mean only. --gossip-steps S
repeats the pure gossip step S − 1 times (noise once a round).

The guarantee (the paper's SecLDP, its Theorem for Decor and its accountant): it assumes that every pair of
neighbours shares a secret (here: the pair stream) that no one else knows, and an adversary that sees every message
(an eavesdropper on all links) together with the secrets and data of a set of curious peers. Against it each round is
a Gaussian mechanism whose noise over the honest peers H has covariance Σ_t = σ²I + σ_cor²L_t (L_t the Laplacian
of the round's pairs inside H; the pairs with a curious peer are known and drop out), so peer i's round costs
Rényi ε(α) = α·Δ²/2·(Σ_t⁻¹)_ii, Δ = --decor-sensitivity, the L2 sensitivity of its vector (η·2C for gradients clipped
to C), and the rounds compose: ρ_i = Σ_t Δ²/2·(Σ_t⁻¹)_ii, ε_i at --decor-delta by p2pfl.privacy.gaussian. With σ_cor =
0 this is local DP's Δ²/(2σ²) a round, and as σ_cor grows on a connected graph it falls to central DP's Δ²/(2|H|σ²).
The records give it against the eavesdropper with no curious peer (H every peer); `secldp_rho` takes any H.

Records: every round `decor_eps_max` (the largest ε_i so far) and `decor_eps_mean`; summary.json adds `decor_ldp_eps`
(the local noise alone, Δ²/(2σ²) a round, composed) and the per-peer ε file, `decor_eps.npy` in the run folder,
computed on rank 0 from the schedule's networks (replayed after --resume).
"""
from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
import scipy.sparse as sp
import torch

from p2pfl.seeding import pair_generator, torch_generator


def pairs(adjacency: sp.spmatrix, active: Collection[int]) -> dict[int, list[int]]:
    """Per active peer, the active peers it shares a link with this round either way (A[i, j]: i hears from j),
    ascending."""
    both = (adjacency + adjacency.T).tocsr()
    return {i: [int(j) for j in sorted(both.indices[both.indptr[i]:both.indptr[i + 1]]) if j != i and j in active]
            for i in sorted(active)}


def local_noise(seed: int, peer: int, round: int, like: torch.Tensor, sigma: float) -> torch.Tensor:
    """ξ_i ~ N(0, σ²I) like `like`, from the peer's own stream (seed, peer, "decor/<round>")."""
    gen = torch_generator(seed, peer, f"decor/{round}", like.device)
    return torch.randn(like.shape, generator=gen, dtype=like.dtype, device=like.device) * sigma


def pair_noise(seed: int, peer: int, partners: Sequence[int], round: int, like: torch.Tensor,
               sigma: float) -> torch.Tensor:
    """Σ_j s_ij v_ij over `partners` (ascending): each v_ij ~ N(0, σ²I) from the pair's stream, + for the smaller
    peer of the pair and − for the larger, so the two ends' terms cancel."""
    total = torch.zeros_like(like)
    for j in partners:
        gen = pair_generator(seed, peer, j, f"decor/{round}", like.device)
        v = torch.randn(like.shape, generator=gen, dtype=like.dtype, device=like.device) * sigma
        total = total + v if peer < j else total - v
    return total


def laplacian(adjacency: np.ndarray) -> np.ndarray:
    """L = D − A of a symmetric 0/1 adjacency matrix (no self-loops)."""
    a = np.array(adjacency, dtype=np.float64)
    np.fill_diagonal(a, 0.0)
    return np.diag(a.sum(axis=1)) - a


def secldp_rho(adjacency: np.ndarray, sigma: float, sigma_cor: float, sensitivity: float,
               honest: Collection[int] | None = None) -> np.ndarray:
    """Each honest peer's ρ of one round (ε(α) = α·ρ): Δ²/2·(Σ⁻¹)_ii, Σ = σ²I + σ_cor²L over the honest peers'
    pairs (`adjacency`: the round's symmetric pairs; `honest`: None for every peer). The other peers' entries are
    0 (their data is the adversary's)."""
    n = adjacency.shape[0]
    keep = np.array(sorted(range(n) if honest is None else honest), dtype=int)
    out = np.zeros(n)
    if keep.size == 0:
        return out
    sub = np.asarray(adjacency, dtype=np.float64)[np.ix_(keep, keep)]
    # (Σ⁻¹)_ii = Σ_k U_ik² / (σ² + σ_cor² λ_k), L = U diag(λ) Uᵀ: exact where inverting Σ itself would lose digits
    # to its condition number (σ_cor ≫ σ)
    lam, U = np.linalg.eigh(laplacian(sub))
    out[keep] = sensitivity ** 2 / 2 * ((U ** 2) @ (1 / (sigma ** 2 + sigma_cor ** 2 * np.clip(lam, 0, None))))
    return out


__all__ = ["laplacian", "local_noise", "pair_noise", "pairs", "secldp_rho"]
