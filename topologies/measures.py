"""Topology measures beyond the spectral gap (SPEC §10): Koloskova et al.'s p and Vogels et al.'s effective number
of neighbours n_eff(γ), as pure functions of a mixing matrix W (rows: what each peer averages).

- p_worst(W) = 1 − ‖W − J‖₂², J = 11ᵀ/K: the worst case over X of the contraction ‖W X − J X‖² / ‖X − J X‖² of
  a row-stochastic W (W J = J, so W X − J X = (W − J)(X − J X)). For a symmetric W it is Koloskova et al.'s
  p = 1 − max(|λ2|, |λ_K|)².
- expected_contraction(W) = ‖W − J‖_F² / (K − 1): the mean of that ratio over Gaussian X (any number of
  columns; X − J X is isotropic on 1⊥, and (W − J)1 = 0); a changing network's p_mean is 1 − its mean over the
  rounds (p2pfl.network.mixing_measures). It is an average, so 1 − it is at least p_worst.
- n_eff(W, γ) = 1 / ((1 − γ) · mean_i Σ_ii), Σ = Q diag(λ²/(1 − γλ²)) Qᵀ with W = Q Λ Qᵀ (Vogels et al. 2022,
  "Beyond spectral gap"); defined for a symmetric W only: a one-way W has no such decomposition, and its
  n_eff is None (recorded as null).

W may be a dense array or a scipy.sparse matrix. Up to DENSE_MAX peers every measure is the exact dense
computation; above it W is never densified: eigenvalues and norms come from ARPACK (eigsh/eigs) on the operator
W − J applied implicitly (x ↦ Wx − mean(x)·1, which maps 1 to 0 and keeps every other eigenvalue of a
row-stochastic W), and n_eff from a Hutchinson estimate of trace(Σ) (`n_eff_estimate`, labelled as such by
topologies.stats).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigs, eigsh

#: A dense array or a scipy.sparse matrix, K×K float64 (rows: what each peer averages).
Matrix = np.ndarray | sp.spmatrix | sp.sparray

#: Up to this many peers the measures are the exact dense computations; above, sparse methods (W never densified).
DENSE_MAX = 512
#: Rademacher probes, their seed, and the CG tolerance of the n_eff estimate above DENSE_MAX.
N_EFF_PROBES = 32
N_EFF_SEED = 0
CG_TOL = 1e-8
#: ARPACK restarts of Lanczos on W − J before |λ2| is taken by shift-invert instead, and that shift's offset.
#: SHIFT must stay below 1 − λ2 (about 1e-7 on a 10,000-peer ring) for the shifted eigenvalues to separate.
LANCZOS_RESTARTS = 100
SHIFT = 1e-10
ROUGH_TOL = 1e-3
#: np.allclose's relative tolerance, which the dense symmetry check uses.
RTOL = 1e-5
#: Vogels et al. 2022's decay, fitted on CIFAR-10 (the default of --n-eff-gamma).
N_EFF_GAMMA = 0.951
TOL = 1e-9


def dense_path(w: Matrix) -> bool:
    """Whether W is small enough (K ≤ DENSE_MAX) for the exact dense computations."""
    return w.shape[0] <= DENSE_MAX


def as_dense(w: Matrix) -> np.ndarray:
    """W as a float64 array (for the dense path only: O(K²) memory)."""
    return w.toarray().astype(np.float64) if sp.issparse(w) else np.asarray(w, dtype=np.float64)


def as_csr(w: Matrix) -> sp.csr_matrix:
    """W as a canonical float64 CSR matrix: duplicates summed, explicit zeros dropped, indices sorted."""
    csr = sp.csr_matrix(w, dtype=np.float64, copy=True)
    csr.sum_duplicates()
    csr.eliminate_zeros()
    csr.sort_indices()
    return csr


def is_symmetric(w: Matrix) -> bool:
    """np.allclose(W, Wᵀ, atol=TOL) in O(nnz) for a sparse W: |W − Wᵀ| ≤ TOL + RTOL·|Wᵀ| entrywise."""
    if not sp.issparse(w):
        return bool(np.allclose(w, w.T, atol=TOL))
    excess = abs(w - w.T) - RTOL * abs(w.T)
    return excess.nnz == 0 or float(excess.max()) <= TOL


def centred_operator(w: sp.csr_matrix) -> LinearOperator:
    """W − J as an operator (J = 11ᵀ/K applied as the mean), with its transpose: never formed densely."""
    wt = w.T.tocsr()
    return LinearOperator(w.shape, matvec=lambda x: w @ x - x.mean(axis=0),
                          rmatvec=lambda y: wt @ y - y.mean(axis=0), dtype=np.float64)


def _start(k: int) -> np.ndarray:
    """A seeded ARPACK starting vector, so the sparse results do not depend on ARPACK's own generator."""
    return np.random.default_rng(N_EFF_SEED).standard_normal(k)


def deflated_radius(w: sp.csr_matrix, symmetric: bool) -> float:
    """max |λ| of W − J: |λ2(W)| for a row-stochastic W (the Perron eigenvalue 1 of W is 0 in W − J)."""
    k = w.shape[0]
    if k < 4:
        return float(np.abs(np.linalg.eigvals(as_dense(w) - 1.0 / k)).max())
    op, count = centred_operator(w), min(3, k - 2)
    if not symmetric:
        return float(np.abs(eigs(op, k=count, which="LM", tol=0, v0=_start(k), return_eigenvectors=False)).max())
    try:
        vals = eigsh(op, k=count, which="LM", tol=0, v0=_start(k), maxiter=LANCZOS_RESTARTS,
                     return_eigenvectors=False)
    except ArpackNoConvergence:
        return _shift_invert_radius(w)
    return float(np.abs(vals).max())


def _shift_invert_radius(w: sp.csr_matrix) -> float:
    """|λ2| of a symmetric row-stochastic W for a spectrum clustered at 1 (long rings, chains, trees), where
    Lanczos on W − J stalls: λ2 by shift-invert (sparse LU of W − σI, sparse on such graphs) about σ = 1 + SHIFT,
    whose two nearest eigenvalues are 1 and λ2; λ_K only as far as it matters: a rough Lanczos value, refined by
    shift-invert about −1 − SHIFT when |λ_K| may exceed λ2 (it is then near −1)."""
    k, csc = w.shape[0], w.tocsc()
    lam2 = float(np.sort(eigsh(csc, k=2, sigma=1.0 + SHIFT, which="LM", tol=0, v0=_start(k),
                               return_eigenvectors=False))[0])
    rough = float(eigsh(centred_operator(w), k=1, which="SA", tol=ROUGH_TOL, v0=_start(k),
                        return_eigenvectors=False)[0])
    if abs(rough) * (1.0 + 2 * ROUGH_TOL) + 1e-9 < abs(lam2):
        return abs(lam2)
    bottom = eigsh(csc, k=1, sigma=-1.0 - SHIFT, which="LM", tol=0, v0=_start(k), return_eigenvectors=False)
    return max(abs(lam2), abs(float(bottom[0])))


def _norm2_squared(w: sp.csr_matrix) -> float:
    """‖W − J‖₂²: the largest eigenvalue of the operator (W − J)ᵀ(W − J)."""
    k = w.shape[0]
    if k < 4:
        return float(np.linalg.norm(as_dense(w) - 1.0 / k, 2)) ** 2
    op = centred_operator(w)
    normal = LinearOperator(w.shape, matvec=lambda x: op.rmatvec(op.matvec(x)), dtype=np.float64)
    vals = eigsh(normal, k=2, which="LA", tol=0, v0=_start(k), return_eigenvectors=False)
    return float(vals.max())


def _centred(w: np.ndarray) -> np.ndarray:
    w = np.asarray(w, dtype=np.float64)
    return w - np.full(w.shape, 1.0 / len(w))


def p_worst(w: Matrix) -> float:
    """1 − ‖W − J‖₂²: Koloskova et al.'s p, the worst-case contraction of one gossip step subtracted from 1."""
    if dense_path(w):
        return 1.0 - float(np.linalg.norm(_centred(as_dense(w)), 2)) ** 2
    csr = as_csr(w)
    if is_symmetric(csr):  # ‖W − J‖₂ of a symmetric W − J is its largest |eigenvalue|
        return 1.0 - deflated_radius(csr, symmetric=True) ** 2
    return 1.0 - _norm2_squared(csr)


def contraction(w: Matrix, x: np.ndarray) -> float:
    """‖W X − X̄‖_F² / ‖X − X̄‖_F², X̄ = J X the peers' mean of X (rows are peers): one step's contraction."""
    mean = x.mean(axis=0, keepdims=True)
    spread = float(((x - mean) ** 2).sum())
    wx = w @ x if sp.issparse(w) else np.asarray(w) @ x
    return float(((np.asarray(wx) - mean) ** 2).sum()) / spread if spread > 0 else 0.0


def expected_contraction(w: Matrix) -> float:
    """E over Gaussian X of `contraction(W, X)` for a row-stochastic W: ‖W − J‖_F² / (K − 1)."""
    k = w.shape[0]
    if k <= 1:
        return 0.0
    if dense_path(w):
        return float((_centred(as_dense(w)) ** 2).sum()) / (k - 1)
    csr = as_csr(w)  # ‖W − J‖_F² = ‖W‖_F² − 2·ΣW_ij/K + 1
    return float((csr.data ** 2).sum() - 2.0 * csr.data.sum() / k + 1.0) / (k - 1)


def _block_cg(apply: Callable[[np.ndarray], np.ndarray], b: np.ndarray, tol: float = CG_TOL) -> np.ndarray:
    """Solve A X = B for a symmetric positive definite A column by column (vectorised conjugate gradients)."""
    x, r = np.zeros_like(b), b.copy()
    p, rs = r.copy(), (r * r).sum(axis=0)
    stop = tol ** 2 * rs
    for _ in range(10 * b.shape[0]):
        if (rs <= stop).all():
            break
        ap = apply(p)
        curv = (p * ap).sum(axis=0)
        alpha = np.divide(rs, curv, out=np.zeros_like(rs), where=curv > 0)
        x += alpha * p
        r -= alpha * ap
        new = (r * r).sum(axis=0)
        p = r + np.divide(new, rs, out=np.zeros_like(rs), where=rs > 0) * p
        rs = new
    return x


def n_eff_estimate(w: Matrix, gamma: float = N_EFF_GAMMA, probes: int = N_EFF_PROBES,
                   seed: int = N_EFF_SEED) -> tuple[float, float]:
    """n_eff of a symmetric row-stochastic W by a Hutchinson estimate of trace(Σ), and its relative standard error.

    Σ1 = 1/(1 − γ)·1 exactly, so trace(Σ) = 1/(1 − γ) + trace(PΣP), P = I − J; the second term is the mean of
    zᵀΣz over Rademacher probes z projected on 1⊥, each Σz = W(W u) with (I − γW²) u = z solved by CG (its
    condition number is at most 1/(1 − γ)). The probes' sample spread gives the standard error."""
    csr = as_csr(w)
    k = csr.shape[0]
    z = np.random.default_rng(seed).choice([-1.0, 1.0], size=(k, probes))
    z -= z.mean(axis=0)
    u = _block_cg(lambda x: x - gamma * (csr @ (csr @ x)), z)
    samples = ((csr @ z) * (csr @ u)).sum(axis=0)  # zᵀW²u = (Wz)ᵀ(Wu), W symmetric
    trace = 1.0 / (1.0 - gamma) + float(samples.mean())
    error = float(samples.std(ddof=1)) / np.sqrt(probes) / trace if probes > 1 else float("inf")
    return float(k / ((1.0 - gamma) * trace)), error


def n_eff(w: Matrix, gamma: float = N_EFF_GAMMA) -> float | None:
    """Vogels et al.'s effective number of neighbours of a symmetric W at decay γ; None for a non-symmetric W.

    Exact up to DENSE_MAX peers, above it `n_eff_estimate`."""
    if not dense_path(w):
        return n_eff_estimate(w, gamma)[0] if is_symmetric(as_csr(w)) else None
    w = as_dense(w)
    if not np.allclose(w, w.T, atol=TOL):
        return None
    lam, q = np.linalg.eigh((w + w.T) / 2)
    lam2 = lam ** 2
    diag = (q ** 2) @ (lam2 / (1.0 - gamma * lam2))  # Σ_ii = Σ_k Q_ik² λ_k²/(1 − γλ_k²)
    return float(1.0 / ((1.0 - gamma) * diag.mean()))
