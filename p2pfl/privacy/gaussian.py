"""The Gaussian mechanism's Rényi accounting as the gossip mechanisms here use it: a release whose Rényi DP of
order α is ε(α) = α·ρ for every α > 1 (ρ-zCDP, Bun & Steinke 2016; a Gaussian of sensitivity Δ and noise σ has
ρ = Δ²/(2σ²)), turned into (ε, δ)-DP by the standard conversion (Mironov 2017, Prop. 3) at its best order:

    ε(δ) = min_{α>1} α·ρ + log(1/δ)/(α − 1) = ρ + 2·sqrt(ρ·log(1/δ)),   at α* = 1 + sqrt(log(1/δ)/ρ).

Muffliato's pairwise ledger and Decor's SecLDP accountant both grow linearly in α, so they record ρ and this ε."""
from __future__ import annotations

import numpy as np


def gaussian_rho(sensitivity: float, sigma: float) -> float:
    """ρ = Δ²/(2σ²): the Rényi slope of one Gaussian release of an L2-sensitivity-Δ value with noise N(0, σ²I)."""
    return sensitivity ** 2 / (2 * sigma ** 2)


def epsilon_at(rho: np.ndarray | float, delta: float) -> np.ndarray | float:
    """(ε, δ)-DP of a release with ε(α) = α·ρ for every α > 1 (elementwise over an array of ρ; ρ = 0 gives 0)."""
    rho = np.asarray(rho, dtype=np.float64)
    out = rho + 2 * np.sqrt(rho * np.log(1 / delta))
    return float(out) if out.ndim == 0 else out
