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

The ledger (`PairwiseLedger`): pairwise network Rényi DP, ε_{u→v}(α) = α·ρ_{u→v}, of what peer v sees about peer
u's value. Noise draws t = 1..J (J = the rounds so far, or 1 under --muffliato-once); draw t adds c_t + η_t to every
peer's vector, c_t ∈ R^K the values (one coordinate of the vectors; the coordinates are independent and add up),
η_t ~ N(0, σ²I). Q_{t,s} = W_{s−1} ⋯ W_{t₀} is the product of the gossip steps between draw t and step s (I at the
first step after it). At step s, v receives from each w it hears (w ≠ v) its current value, Σ_{t drawn by s}
(Q_{t,s})_w (c_t + η_t); v also knows its own c_{t,v} and η_{t,v}, so it subtracts them: its view, over every
step of the run so far and every draw before each step (not only that round's steps: the old ledger's flaw), is

    Y = B (c + η),   B = the rows (Q_{t,s})_w over all draws t side by side, column v of each block zeroed,

a Gaussian of covariance σ²BBᵀ. Changing u's data moves c_{t,u} by d_t, |d_t| ≤ Δ (--muffliato-sensitivity), and
Y's mean by Σ_t d_t b_t, b_t = B's column (t, u); the Rényi divergence of order α is α/(2σ²)·‖Σ_t d_t b_t‖²_{(BBᵀ)⁺}.
With q_t = b_tᵀ(BBᵀ)⁺b_t = (Π_B)_{(t,u),(t,u)} (Π_B = Bᵀ(BBᵀ)⁺B the projector on B's row space), the ledger is

    ρ_{u→v} = Δ²/(2σ²) · min( (Σ_t √q_t)²,  n_{u→v} ),   n_{u→v} = the draws t whose b_t ≠ 0 (u's draw reached v).

It is an upper bound (≥ the exact divergence):
  (i) the seminorm's triangle inequality: ‖Σ_t d_t b_t‖ ≤ Σ_t |d_t|·‖b_t‖ ≤ Δ Σ_t √q_t, for every change of u's
      values in every draw (Muffliato-GD: fresh data each round) and so for a change of the first draw's value alone
      (averaging; `--algorithm consensus` without --muffliato-once: q_1 ≤ (Σ_t √q_t)²); for vectors, coordinate by
      coordinate, the same with ‖d_t‖₂ ≤ Δ;
  (ii) n_{u→v}: the view is a function of the independent per-draw views B_t(c_t + η_t), each of which costs u at
      most local DP's Δ²/(2σ²) (a function of the noisy vector c_t + η_t) and nothing if b_t = 0; divergences of
      independent releases add.
It exceeds the exact value by at most a factor J: with random signs d_t = ±Δ, E‖Σ_t d_t b_t‖² = Δ²Σ_t q_t, so the
exact (the worst d) is ≥ Δ²Σ_t q_t ≥ Δ²(Σ_t √q_t)²/J (Cauchy–Schwarz). Under --muffliato-once J = 1 and the ledger
is the exact value itself. Against the averaging value alone (the first draw, later draws pure noise) the ratio is
not bounded: it is the price of accounting fresh data every round. The values are taken as fixed functions of the
data, as in the paper's averaging analysis; for Muffliato-GD a round's gradient depends on the earlier noisy models,
which this ledger, like the paper's composition over GD rounds, does not account for. No collusion: a coalition sees
the union of its members' views.

Why not the paper's sum, Σ_s Σ_w (Q_s)²_wu / ‖(Q_s)_w‖² (its code, private.py): it adds up each message's
divergence as if the messages' noises were independent; they are not (the same η, mixed again), and the sum can be
below the exact value (by 7× on the cycle of 8 with one noise draw), so it is not used.

Computation: for each observer v an orthonormal basis of B's row space grows step by step (the new rows'
components outside it, projected out twice; a direction whose size is below 1e-10 of its message's norm is taken
as rounding and dropped: the one approximation, shared with any float64 pseudo-inverse), and q_t is the squared norm
of the basis' column (t, u). That is dense, O(J·K) numbers a basis row: while the bases hold at most `DENSE_LIMIT`
numbers in all (a ring of 16 peers over 100 rounds fits), the ledger is `exact`; past it, it drops them and records
(ii) alone, n_{u→v}·Δ²/(2σ²) (`reach`: still an upper bound, without the network's amplification for the pairs
reached). The summary says which (`muffliato_ledger`).

Records: every round `muffliato_eps_max` and `muffliato_eps_mean` over the ordered pairs u ≠ v (cumulative, at δ =
--muffliato-delta; ε = p2pfl.privacy.gaussian.epsilon_at of ρ); summary.json adds the local-DP ε of the same noise
(`muffliato_ldp_eps`), ε by graph distance (`muffliato_eps_by_distance`, [distance, mean, max] on the run's topology
graph) and the matrix's file; the full K × K matrix of ε_{u→v} (row u, column v) is `muffliato_eps.npy` in the run
folder. The ledger is computed from the schedule's networks (link failures, churn and participation included) on
rank 0, and replayed from round 1 after --resume; a message rejected as non-finite (a fault) still counts as
observed. Under --muffliato-once the noise is taken as drawn in round 1 for every peer.
"""
from __future__ import annotations

import networkx as nx
import numpy as np
import scipy.sparse as sp
import torch

from p2pfl.seeding import torch_generator

#: The run folder's file of the pairwise ε matrix (row u, column v: ε_{u→v}).
MATRIX_FILE = "muffliato_eps.npy"
#: The state key of a peer that has added its noise (--muffliato-once).
NOISED = "muffliato_noised"
#: The most numbers the observers' bases may hold in all before the ledger falls back to `reach`.
DENSE_LIMIT = 20_000_000
#: A new direction smaller than this fraction of its message's norm is rounding, not information.
TOLERANCE = 1e-10


def noise(seed: int, peer: int, round: int, like: torch.Tensor, sigma: float) -> torch.Tensor:
    """ξ ~ N(0, σ²I) shaped and typed like `like`, from `peer`'s stream (seed, peer, "muffliato/<round>")."""
    gen = torch_generator(seed, peer, f"muffliato/{round}", like.device)
    return torch.randn(like.shape, generator=gen, dtype=like.dtype, device=like.device) * sigma


class PairwiseLedger:
    """ρ_{u→v} of the module docstring, kept step by step: `inject` when the peers draw fresh noise, `step` for
    every gossip step (its W and who hears whom), `rho` the totals (row u, column v; the diagonal is 0)."""

    def __init__(self, n: int, scale: float, dense_limit: int = DENSE_LIMIT) -> None:
        self.n, self.scale, self.dense_limit = n, scale, dense_limit  # scale: Δ²/(2σ²), local DP's ρ of a draw
        self.products: list[np.ndarray] = []  # Q_t: the gossip steps since draw t (in `reach`: its support only)
        self.reached: list[np.ndarray] = []  # per draw, [u, v]: b_t ≠ 0
        self.bases: list[np.ndarray] | None = [np.zeros((0, 0)) for _ in range(n)]  # per v, rows orthonormal
        self.full = 0  # in `reach`: the draws that reached every pair, retired (their products no longer kept)

    @property
    def mode(self) -> str:
        """`exact` while the bases are kept, `reach` once they outgrew `dense_limit`."""
        return "exact" if self.bases is not None else "reach"

    def inject(self) -> None:
        """A fresh noise draw: its product starts at I, and the bases gain its K columns (zero in older rows)."""
        self.products.append(np.eye(self.n, dtype=np.float64 if self.bases is not None else bool))
        self.reached.append(np.zeros((self.n, self.n), dtype=bool))
        if self.bases is not None:
            self.bases = [np.hstack([U, np.zeros((U.shape[0], self.n))]) for U in self.bases]

    def step(self, W: np.ndarray, hears: np.ndarray) -> None:
        """One gossip step: v receives every w's current value with hears[v, w] (w ≠ v), then Q_t ← W Q_t."""
        assert self.products or self.full, "a gossip step before any noise"
        observed = np.array(hears, dtype=bool)
        np.fill_diagonal(observed, False)
        seen = sp.csr_matrix(observed, dtype=np.float64)  # a few senders a row: O(edges · K) a draw, not K³
        for Q, reached in zip(self.products, self.reached):
            reached |= (seen @ (Q != 0).astype(np.float64)).T > 0  # [u, v]: Σ_w hears[v, w]·[Q_wu ≠ 0]
        if self.bases is not None:
            self.bases = [self._grow(U, v, np.flatnonzero(observed[v])) for v, U in enumerate(self.bases)]
            if sum(U.size for U in self.bases) > self.dense_limit:
                self.bases = None
                self.products = [Q != 0 for Q in self.products]
        if self.bases is None:  # `reach`: supports only (W ≥ 0: no cancellation), sparse W, finished draws retired
            self._retire()
            links = sp.csr_matrix(np.asarray(W) != 0, dtype=np.float64)
            self.products = [(links @ S.astype(np.float64)) > 0 for S in self.products]
        else:
            self.products = [W @ Q for Q in self.products]

    def _retire(self) -> None:
        """In `reach`: count and drop the draws that have reached every pair (their count can only stay 1), so
        the draws kept are those still spreading, about a diameter's worth of rounds, not every round's."""
        off = ~np.eye(self.n, dtype=bool)
        kept = [(S, r) for S, r in zip(self.products, self.reached) if not r[off].all()]
        self.full += len(self.products) - len(kept)
        self.products, self.reached = [S for S, _ in kept], [r for _, r in kept]

    def _grow(self, U: np.ndarray, v: int, senders: np.ndarray) -> np.ndarray:
        """U with the directions of v's new rows (Q_t)_w, w in `senders`, that it lacks (v's columns zeroed)."""
        if senders.size == 0:
            return U
        rows = np.hstack([Q[senders] for Q in self.products])
        rows[:, v::self.n] = 0.0
        norms = np.linalg.norm(rows, axis=1)
        rows, norms = rows[norms > 0], norms[norms > 0]
        if rows.size == 0:
            return U
        rows = rows / norms[:, None]
        for _ in range(2):  # projected out twice: Gram-Schmidt's lost orthogonality restored
            rows = rows - (rows @ U.T) @ U
        _, sizes, directions = np.linalg.svd(rows, full_matrices=False)
        return np.vstack([U, directions[sizes > TOLERANCE]])

    @property
    def rho(self) -> np.ndarray:
        """ρ_{u→v} so far (row u, column v; diagonal 0)."""
        draws = self.full + (np.sum(self.reached, axis=0, dtype=np.float64) if self.reached
                             else np.zeros((self.n, self.n)))
        if self.bases is not None and self.reached:
            J = len(self.products)
            total = np.zeros((self.n, self.n))
            for v, U in enumerate(self.bases):
                q = np.minimum((U ** 2).sum(axis=0).reshape(J, self.n), 1.0)  # [t, u]: (Π_B) diagonal
                total[:, v] = np.sqrt(q).sum(axis=0) ** 2
            draws = np.minimum(total, draws)
        out = self.scale * draws
        np.fill_diagonal(out, 0.0)
        return out


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
