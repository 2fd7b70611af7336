"""Reconstruction of gradients from decentralised gradient descent, as El Mrini, Cyffers, Bellet ("Privacy Attacks
in Decentralized Learning", ICML 2024, §4) attack it: each non-curious peer v is modelled with ONE unknown update
Δ_v, the same in every round it trains (the paper's D-GD setting, where the colluders solve for each peer's
gradient on its fixed data). Under `--gossip average` the message peer j sends in round t is
m_j(t) = x_j(t−1) + a_j(t) Δ_j, a_j(t) = 1 when j is active in round t (0 when it sits out), and x(t) = W_t m(t). So
every message is a known linear function of the 2K unknowns z = (x(0), Δ): C_t = S_{t−1} + [0, diag(a(t))],
S_t = W_t C_t, S_0 = [I, 0]. The colluders' knowledge matrix stacks the initial models they know (with
`--curious-start shared`, the default and the paper's setting, every peer's: all start from the curious peers' own
initial model, a common initialisation; with `unknown`, only their own), their own updates (rows a_a(t) e_(K+a))
and every message they received (rows C_t[j]); Δ_v is identifiable exactly when e_(K+v) lies in its row space, and
the minimum-norm least-squares solution is then Δ_v. The start matters: with x(0) unknown, each of W's eigenmodes
shows the colluders one mixture of x(0) and Δ, and on a chain attacked from its end no update is identifiable;
with it known, every one is.

Unlike `reconstruction-dpsgd`, whose every round brings K fresh unknowns, the unknowns stay 2K however many rounds
are followed, so each round's messages add equations and peers far from the colluders become identifiable. The
price is the assumption: where a peer's update changes from round to round (a gradient that depends on the model,
stochastic gradients), the system is inconsistent and its least-squares answer only approximates the updates; the
error is scored against each round's true update (`curious_dgd_error`, the largest relative error over the followed
rounds), so a violated assumption shows as peers that are identifiable but not reconstructed. The records follow
`reconstruction-dpsgd`'s (prefix `curious_dgd_`), counting (peer, round) pairs for the `updates_` ones.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from p2pfl.curious import CURIOUS
from p2pfl.curious.dpsgd_reconstruction import DpsgdReconstruction
from p2pfl.options import opt


@CURIOUS.register("reconstruction-dgd")
class DgdReconstruction(DpsgdReconstruction):
    """The curious peers reconstruct each peer's one update of D-GD (`--gossip average`), assumed constant."""

    paper = "El Mrini, Cyffers, Bellet, ICML 2024 (D-GD)"
    prefix = "curious_dgd_"

    UNKNOWNS = "2 × peers"
    BOUNDED_BY = "peers"

    @staticmethod
    def unknowns(peers: int, rounds: int) -> int:
        """Every peer's x(0) and its one update, however many rounds are followed."""
        return 2 * peers

    class Options:
        curious_start: str = opt("shared", "reconstruction-dgd: the others' initial models as the curious peers "
                                           "know them: shared (all start from the curious peers' own: a common "
                                           "initialisation, the paper's setting) or unknown", ("shared", "unknown"),
                                 section="curious")

    def __init__(self, ctx: Any, algorithm: Any, curious: frozenset[int], options: Any) -> None:
        super().__init__(ctx, algorithm, curious, options)
        self.active: dict[int, np.ndarray] = {}  # round -> a(t)
        if options.curious_start == "shared":  # every x_v(0) is a curious peer's own
            n = ctx.n_peers
            self.m = np.eye(n, 2 * n)
            self.y = None if self.y is None else np.repeat(self.y[:1], n, axis=0)

    def _active(self, t: int) -> np.ndarray:
        if t not in self.active:
            a = np.zeros(self.ctx.n_peers)
            a[sorted(self.ctx.schedule.at(t).active)] = 1.0
            self.active[t] = a
        return self.active[t]

    def sent(self, t: int) -> np.ndarray:
        """Round t's messages: x(t − 1) + a(t) Δ."""
        n = self.ctx.n_peers
        sent = self.state.copy()
        sent[:, n:] += np.diag(self._active(t))
        return sent

    def own_row(self, t: int, a: int) -> np.ndarray:
        """Curious peer a knows its update of round t: a_a(t) Δ_a."""
        return self._active(t)[a] * np.eye(1, 2 * self.ctx.n_peers, self.column(t, a))

    def column(self, t: int, v: int) -> int:
        """Every round's update of v is the one unknown Δ_v."""
        return self.ctx.n_peers + v

    def predicted(self, estimate: np.ndarray, t: int, v: int) -> np.ndarray:
        return self._active(t)[v] * estimate[self.column(t, v)]
