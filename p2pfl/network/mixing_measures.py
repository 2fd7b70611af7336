"""SPEC §10's mixing measures of a run's network, one definition per key for every network: static, with link
failures, participation, churn or crashes, dynamic per-round topologies, epidemic, teleport (issue 56).

Over the rounds t that enter, M_t is the round operator (p2pfl.network.schedule_measures.round_operator: W_t after
teleport's hand-over) restricted to the alive peers, K their number and J = 11ᵀ/K:
- spectral_gap = 1 − |λ2(E[M_t])|: the spectral gap of the expected mixing matrix;
- p = 1 − λ_max(E[(M_t − J)ᵀ(M_t − J)]): Koloskova et al. 2020's p (their assumption
  E‖X M − X̄‖² ≤ (1 − p)‖X − X̄‖²), the worst case over X of the expected contraction of one step. For one fixed W
  it is topologies.measures.p_worst(W) = 1 − ‖W − J‖₂²;
- p_mean = 1 − E_t[‖M_t − J‖_F² / (K − 1)]: 1 − the mean contraction on random (Gaussian) X
  (topologies.measures.expected_contraction, exact: no X is drawn). An average, so p_mean ≥ p;
- n_eff = Vogels et al. 2022's effective number of neighbours of E[M_t] at n_eff_gamma (topologies.measures.n_eff;
  a Hutchinson estimate above DENSE_MAX peers, named in `estimated`); None where E[M_t] is not symmetric.
Larger is faster mixing for every one of them.

Which rounds: a network with nothing drawn and nothing changing (static topology, every peer up, no failures) has
one W, measured exactly ("static W, exact"). Any other: the rounds 1..R of the run, or SAMPLED_ROUNDS of them evenly
spaced, that have the alive set of the last sampled round (under --crash, so that every M_t has the same peers);
the expectations are the means over those rounds.

Computation: E[(M − J)ᵀ(M − J)] = E[MᵀM] − c̄1ᵀ/K − 1c̄ᵀ/K + J with c̄ = E[Mᵀ1] (M1 = 1). Up to DENSE_MAX peers it is
formed densely and its largest eigenvalue taken by eigvalsh; above, E[MᵀM] stays sparse and λ_max comes from ARPACK:
for c̄ = 1 (every M_t doubly stochastic on average) the operator is E[MᵀM] − J, a symmetric stochastic matrix
deflated (topologies.measures.deflated_radius, with its shift-invert fallback on long rings), else eigsh on the
operator x ↦ E[MᵀM]x − c̄(1ᵀx)/K − 1(c̄ᵀx)/K + 1(1ᵀx)/K. Nothing is densified above DENSE_MAX.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, eigsh

from p2pfl.network.schedule import NetworkSchedule
from p2pfl.network.schedule_measures import round_operator
from topologies import measures
from topologies.measures import DENSE_MAX, N_EFF_GAMMA, as_csr, expected_contraction, is_symmetric, p_worst
from topologies.records import MixingMeasures
from topologies.stats import second_eigenvalue_modulus

#: At most this many rounds enter the measures of a changing network (evenly spaced over the run).
SAMPLED_ROUNDS = 256
#: The rule of a network with one W.
STATIC_RULE = "static W, exact"
#: Up to DENSE_MAX peers, a round whose M_t holds more than this share of K² nonzeros has MᵀM formed by BLAS.
DENSE_FILL = 0.05


def changes(schedule: NetworkSchedule) -> bool:
    """Whether the network's M_t differs between rounds (then the measures are means over sampled rounds)."""
    return (schedule.kind != "static" or schedule.participation < 1.0 or schedule.churn > 0.0
            or schedule.link_failure > 0.0 or bool(schedule.crashes))


def sampled_rounds(rounds: int) -> list[int]:
    """The rounds 1..`rounds`, or SAMPLED_ROUNDS of them evenly spaced."""
    if rounds <= SAMPLED_ROUNDS:
        return list(range(1, rounds + 1))
    return sorted({int(t) for t in np.linspace(1, rounds, SAMPLED_ROUNDS).round()})


def round_matrices(schedule: NetworkSchedule, rounds: int) -> tuple[list[sp.csr_matrix], list[int], list[int]]:
    """(M_t restricted to the alive peers for each round t used, those rounds, the alive peers): the sampled rounds
    whose alive set is the last sampled round's."""
    sampled = sampled_rounds(max(1, rounds))
    alive = schedule.alive(sampled[-1])
    keep = sorted(alive)
    used = [t for t in sampled if schedule.alive(t) == alive]
    return [as_csr(round_operator(schedule.at(t))[keep][:, keep]) for t in used], used, keep


def _rule(used: int, sampled: int, rounds: int, peers: int, total: int) -> str:
    rule = f"mean over {used} sampled rounds of {rounds}"
    if used < sampled or peers < total:
        rule += (f" (those whose alive peers are the last sampled round's {peers} of {total}; "
                 f"{sampled - used} sampled rounds with another alive set left out)")
    return rule


def _worst_dense(gram: np.ndarray, c: np.ndarray) -> float:
    """λ_max of E[MᵀM] − c̄1ᵀ/K − 1c̄ᵀ/K + J, dense."""
    k = gram.shape[0]
    ones = np.ones(k)
    centred = gram - np.outer(c, ones) / k - np.outer(ones, c) / k + 1.0 / k
    return float(np.linalg.eigvalsh((centred + centred.T) / 2).max())


def _worst_sparse(gram: sp.csr_matrix, c: np.ndarray) -> float:
    """λ_max of E[MᵀM] − c̄1ᵀ/K − 1c̄ᵀ/K + J with E[MᵀM] sparse, never densified (module docstring)."""
    k = gram.shape[0]
    if np.allclose(c, 1.0, rtol=0.0, atol=measures.TOL):  # E[MᵀM] − J: PSD, so its radius is λ_max
        return measures.deflated_radius(gram, symmetric=True)

    def apply(x: np.ndarray) -> np.ndarray:
        total, along = x.sum(axis=0), c @ x
        return gram @ x - np.multiply.outer(c, total) / k - np.multiply.outer(np.ones(k), along) / k + total / k

    op = LinearOperator(gram.shape, matvec=apply, dtype=np.float64)
    start = np.random.default_rng(measures.N_EFF_SEED).standard_normal(k)  # seeded, as topologies.measures does
    vals = eigsh(op, k=1, which="LA", tol=0, v0=start, return_eigenvectors=False)
    return float(vals.max())


def _n_eff(mean: Any, gamma: float) -> tuple[float | None, list[str]]:
    """n_eff of E[M] (None where it is not symmetric) and, above DENSE_MAX, the line naming its estimate."""
    if measures.dense_path(mean):
        return measures.n_eff(mean, gamma), []
    if not is_symmetric(mean):
        return None, []
    value, error = measures.n_eff_estimate(mean, gamma)
    return value, [f"n_eff: Hutchinson estimate of trace(Σ) of E[M], {measures.N_EFF_PROBES} Rademacher probes on 1⊥ "
                   f"(seed {measures.N_EFF_SEED}), CG to {measures.CG_TOL:g}; relative standard error {error:.1e}"]


def static_measures(w: Any, gamma: float = N_EFF_GAMMA, shown: Mapping[str, Any] | None = None) -> MixingMeasures:
    """The measures of one fixed W (exact; the same definitions, E over one matrix): 1 − |λ2(W)|, p_worst(W),
    1 − expected_contraction(W), n_eff(W). `shown`: W's topology statistics (topologies.stats.statistics at the same
    γ), whose spectral gap, p_worst and n_eff are reused rather than computed again."""
    if not measures.dense_path(w):
        w = as_csr(w)
    if shown is not None and shown.get("n_eff_gamma") == gamma:
        gap, p, neff = shown["spectral_gap"], shown["p_worst"], shown["n_eff"]
        estimated = [line for line in shown.get("estimated", []) if line.startswith("n_eff")]
    else:
        gap, p = 1.0 - second_eigenvalue_modulus(w), p_worst(w)
        neff, estimated = _n_eff(w, gamma)
    return MixingMeasures(spectral_gap=float(gap), p=float(p), p_mean=1.0 - expected_contraction(w),
                          n_eff=None if neff is None else float(neff), n_eff_gamma=float(gamma), rounds=1,
                          rule=STATIC_RULE, peers=int(w.shape[0]), estimated=estimated)


def mixing_measures(schedule: NetworkSchedule, rounds: int, gamma: float = N_EFF_GAMMA,
                    shown: Mapping[str, Any] | None = None) -> MixingMeasures:
    """The manifest's `stats["mixing"]` of a run's network over its `rounds` (module docstring). `shown`: the
    topology statistics of the static W, reused for a network that does not change."""
    if not changes(schedule):
        return static_measures(schedule.static_weights, gamma, shown)
    mats, used, keep = round_matrices(schedule, rounds)
    k, n = len(keep), len(mats)
    dense = k <= DENSE_MAX
    mean = sp.csr_matrix((k, k))
    gram_sparse = sp.csr_matrix((k, k))
    gram_dense = np.zeros((k, k)) if dense else None
    contracted = 0.0
    for m in mats:
        mean = mean + m
        if dense and m.nnz > DENSE_FILL * k * k:
            d = m.toarray()
            gram_dense += d.T @ d
        else:
            gram_sparse = gram_sparse + (m.T @ m).tocsr()
        contracted += expected_contraction(m)
    mean = as_csr(mean / n)
    c = np.asarray(mean.sum(axis=0)).ravel()  # c̄ = E[Mᵀ1]
    if dense:
        gram = (gram_dense + gram_sparse.toarray()) / n
        worst = _worst_dense(gram, c)
        mean_w: Any = mean.toarray()
    else:
        worst = _worst_sparse(as_csr(gram_sparse / n), c)
        mean_w = mean
    neff, estimated = _n_eff(mean_w, gamma)
    return MixingMeasures(spectral_gap=1.0 - second_eigenvalue_modulus(mean_w), p=1.0 - worst,
                          p_mean=1.0 - contracted / n, n_eff=None if neff is None else float(neff),
                          n_eff_gamma=float(gamma), rounds=n,
                          rule=_rule(n, len(sampled_rounds(max(1, rounds))), max(1, rounds), k, schedule.n),
                          peers=k, estimated=estimated)
