"""Topology measures beyond the spectral gap (SPEC §10): Koloskova et al.'s p and Vogels et al.'s effective number
of neighbours n_eff(γ), as pure functions of a mixing matrix W (rows: what each peer averages).

- p_worst(W) = 1 − ‖W − J‖₂², J = 11ᵀ/K: the worst case over X of the contraction ‖W X − J X‖² / ‖X − J X‖² of
  a row-stochastic W (W J = J, so W X − J X = (W − J)(X − J X)). For a symmetric W it is Koloskova et al.'s
  p = 1 − max(|λ2|, |λ_K|)².
- expected_contraction(W) = ‖W − J‖_F² / (K − 1): the mean of that ratio over Gaussian X (any number of
  columns; X − J X is isotropic on 1⊥, and (W − J)1 = 0), which the random-X estimate of a changing network
  (p2pfl.network.mixing_rate) converges to. It is an average, so 1 − it is at least p_worst.
- n_eff(W, γ) = 1 / ((1 − γ) · mean_i Σ_ii), Σ = Q diag(λ²/(1 − γλ²)) Qᵀ with W = Q Λ Qᵀ (Vogels et al. 2022,
  "Beyond spectral gap"); defined for a symmetric W only: a one-way W has no such decomposition, and its
  n_eff is None (recorded as null).
"""
from __future__ import annotations

import numpy as np

#: Vogels et al. 2022's decay, fitted on CIFAR-10 (the default of --n-eff-gamma).
N_EFF_GAMMA = 0.951
TOL = 1e-9


def _centred(w: np.ndarray) -> np.ndarray:
    w = np.asarray(w, dtype=np.float64)
    return w - np.full(w.shape, 1.0 / len(w))


def p_worst(w: np.ndarray) -> float:
    """1 − ‖W − J‖₂²: Koloskova et al.'s p, the worst-case contraction of one gossip step subtracted from 1."""
    return 1.0 - float(np.linalg.norm(_centred(w), 2)) ** 2


def contraction(w: np.ndarray, x: np.ndarray) -> float:
    """‖W X − X̄‖_F² / ‖X − X̄‖_F², X̄ = J X the peers' mean of X (rows are peers): one step's contraction."""
    mean = x.mean(axis=0, keepdims=True)
    spread = float(((x - mean) ** 2).sum())
    return float(((np.asarray(w) @ x - mean) ** 2).sum()) / spread if spread > 0 else 0.0


def expected_contraction(w: np.ndarray) -> float:
    """E over Gaussian X of `contraction(W, X)` for a row-stochastic W: ‖W − J‖_F² / (K − 1)."""
    k = len(w)
    return float((_centred(w) ** 2).sum()) / (k - 1) if k > 1 else 0.0


def n_eff(w: np.ndarray, gamma: float = N_EFF_GAMMA) -> float | None:
    """Vogels et al.'s effective number of neighbours of a symmetric W at decay γ; None for a non-symmetric W."""
    w = np.asarray(w, dtype=np.float64)
    if not np.allclose(w, w.T, atol=TOL):
        return None
    lam, q = np.linalg.eigh((w + w.T) / 2)
    lam2 = lam ** 2
    diag = (q ** 2) @ (lam2 / (1.0 - gamma * lam2))  # Σ_ii = Σ_k Q_ik² λ_k²/(1 − γλ_k²)
    return float(1.0 / ((1.0 - gamma) * diag.mean()))
