"""Reconstruction of local updates from D-PSGD (El Mrini, Cyffers, Bellet, "Privacy Attacks in Decentralized
Learning", ICML 2024, §4): colluding curious peers know W and every message their neighbours send them. Under
`--gossip average` a round is x(t) = W_t m(t), where the message peer j sends is m_j(t) = x_j(t−1) + Δ_j(t) and
Δ_j(t) = −η g_j(t) is its local update (the gradients of the quadratic method's linear least-squares model, or any
other). So m(t) = C_t z is a known linear function of the unknowns z = (x(0), Δ(1), …, Δ(R)) (K(R + 1) of them):
C_1 = [I, I, 0, …], C_{t+1} = W_t C_t + E_{t+1} (E_s selects Δ(s)). The knowledge matrix stacks the curious peers'
own initial values and updates (unit rows) and, for every message a curious peer received, its row C_t[j];
Δ_v(s) is identifiable exactly when e_(s, v) lies in its row space, and the minimum-norm least-squares solution
(`knowledge_solve`, shared with the consensus attack) is then Δ_v(s).

The unknowns are bounded: the attack follows the first `--curious-rounds` rounds (R) and refuses
K(R + 1) > MAX_UNKNOWNS. Each evaluation records, over the non-curious peers and the followed rounds in which the
peer sent (`curious_dpsgd_` + …): `identifiable` and `reconstructed` (peers whose every update from round 2
on is identifiable / within --curious-tolerance: Δ_v(1) never separates from x_v(0); FIRST_SEPARABLE),
`reconstructed_non_neighbours`, `updates_identifiable` and `updates_reconstructed` (pairs (peer, round)) and
`knowledge_rank`; per peer, `curious_dpsgd_error`, the largest relative error of its updates (round 1's
included). The truth the attack is scored against (never used to solve) is each sender's message minus its
model before the round, as every rank sees them; rank 0 holds the system.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from p2pfl.capabilities import GIVES_GRADIENTS, MIXES_BY_W
from p2pfl.curious import CURIOUS, CuriousAttack, Inbox
from p2pfl.curious.reconstruction import IN_ROW_SPACE, Reconstruction, knowledge_solve, mixing
from p2pfl.network import RoundNetwork
from p2pfl.options import Check, catalogue, opt

#: The columns of the knowledge matrix the attack accepts: K · (--curious-rounds + 1).
MAX_UNKNOWNS = 8192
#: The first round whose update can be told apart: a non-curious peer's Δ_v(1) only ever reaches a message as
#: x_v(0) + Δ_v(1) (its first message, and every later one through W), so with x_v(0) unknown it never separates.
#: The per-peer counts (`identifiable`, `reconstructed`) are over the updates from this round on.
FIRST_SEPARABLE = 2


@CURIOUS.register("reconstruction-dpsgd")
class DpsgdReconstruction(Reconstruction):
    """The curious peers reconstruct the local updates of D-PSGD (`--gossip average`) from the messages they get."""

    paper = "El Mrini, Cyffers, Bellet, ICML 2024"
    prefix = "curious_dpsgd_"

    class Options:
        curious_rounds: int = opt(10, "reconstruction-dpsgd and -dgd: the rounds whose messages the attack follows "
                                      "(-dpsgd's unknowns: the peers' initial values and updates of these rounds)",
                                  section="curious", bounds=">= 1")

    @classmethod
    def check_method(cls, cfg: Any, check: Check) -> None:
        """The messages carry local updates: a method that mixes by W and hands the scheme gradients."""
        method = catalogue().get(cfg.algorithm, cfg)
        check(method.can(MIXES_BY_W) and method.can(GIVES_GRADIENTS), "curious_attack",
              f"{cls.name} reads D-PSGD (a method that mixes by W and takes gradient steps), "
              f"not {cfg.algorithm}")

    @classmethod
    def check_resolved(cls, cfg: Any, check: Check) -> None:
        super(Reconstruction, cls).check_resolved(cfg, check)  # the base's: not the consensus attack's K × K bound
        if cfg.curious is not None:
            unknowns = cls.unknowns(cfg.peers, cfg.curious_rounds)
            check(unknowns <= MAX_UNKNOWNS, cls.BOUNDED_BY,
                  f"{cls.name} solves for {cls.UNKNOWNS} = {unknowns} unknowns: at most {MAX_UNKNOWNS}")

    #: The unknowns the attack solves for, as its refusal names them, and the option the refusal names.
    UNKNOWNS = "peers × (rounds + 1)"
    BOUNDED_BY = "curious_rounds"

    @staticmethod
    def unknowns(peers: int, rounds: int) -> int:
        """The columns of the knowledge matrix: every peer's x(0) and its update of each followed round."""
        return peers * (rounds + 1)

    def __init__(self, ctx: Any, algorithm: Any, curious: frozenset[int], options: Any) -> None:
        CuriousAttack.__init__(self, ctx, algorithm, curious, options)
        n, rounds = ctx.n_peers, options.curious_rounds
        self.seen: dict[tuple[int, int], np.ndarray] = {}  # (round, sender) -> its message, kept coordinates
        self.before: dict[tuple[int, int], np.ndarray] = {}  # (round, local peer) -> its model before the round
        self.done = 0  # the last round whose messages the system holds
        self.truth: dict[tuple[int, int], np.ndarray] = {}  # (round, sender) -> Δ (rank 0; to score only)
        self.state = np.eye(n, self.unknowns(n, rounds))  # coefficients of x(done) in the unknowns
        vectors = algorithm.consensus_vectors() or {}
        parts = ctx.world.gather({p: self._kept(v) for p, v in vectors.items() if p in curious})
        own = sorted(curious)  # the curious peers' own initial values
        self.m = np.eye(n, self.unknowns(n, rounds))[own]
        self.y = np.stack([next(part[a] for part in parts if a in part) for a in own]) if parts is not None else None
        neighbours = {q for a in curious for q in ctx.graph.neighbors(a)} - curious
        self.targets = [v for v in range(n) if v not in curious]
        self.far = [v for v in self.targets if v not in neighbours]

    def _kept(self, v: Any) -> np.ndarray:
        """The kept coordinates of a vector, in float64 on the CPU: a copy, never a view of a buffer the run reuses
        (a model updated in place, a receive buffer of the transport)."""
        return v.detach().reshape(-1)[:self.options.curious_coords].double().cpu().numpy().copy()

    def observe(self, round: int, inbox: Inbox) -> None:
        if round > self.options.curious_rounds:
            return
        for p, x in (self.algorithm.consensus_vectors() or {}).items():
            self.before.setdefault((round, p), self._kept(x))
        for receiver in sorted(inbox):  # every sender's message, to score; the curious receivers' ones to solve
            for sender, message in inbox[receiver].items():
                self.seen.setdefault((round, sender), self._kept(message))
                if receiver in self.curious:
                    self.seen.setdefault((-round, sender), self.seen[(round, sender)])

    def evaluate(self, round: int, final: bool, net: RoundNetwork
                 ) -> tuple[dict[str, float], dict[int, dict[str, float]]]:
        parts = self.ctx.world.gather((self.seen, self.before))
        self.seen, self.before = {}, {}
        if parts is None:
            return {}, {}
        seen = {key: v for part, _ in parts for key, v in part.items()}
        before = {key: v for _, part in parts for key, v in part.items()}
        k = self.options.curious_coords
        for (t, j), message in seen.items():
            if t > 0:
                self.truth[(t, j)] = message - before[(t, j)]
        rows, values = [self.m], [self.y]
        for t in range(self.done + 1, min(round, self.options.curious_rounds) + 1):
            sent = self.sent(t)
            for a in sorted(self.curious):  # the curious peers know their own updates (0 when they sat out)
                rows.append(self.own_row(t, a))
                values.append(self.truth.get((t, a), np.zeros(k))[None])
            senders = sorted(j for (r, j) in seen if r == -t)
            if senders:
                rows.append(sent[senders])
                values.append(np.stack([seen[(-t, j)] for j in senders]))
            self.state = mixing(self.ctx.schedule.at(t)) @ sent
            self.done = t
        self.m, self.y, estimate, projected = knowledge_solve(np.concatenate(rows), np.concatenate(values))
        return self._score(estimate, projected)

    def sent(self, t: int) -> np.ndarray:
        """The coefficients of round t's messages in the unknowns: x(t − 1) + Δ(t)."""
        n = self.ctx.n_peers
        sent = self.state.copy()
        sent[:, t * n:(t + 1) * n] += np.eye(n)
        return sent

    def own_row(self, t: int, a: int) -> np.ndarray:
        """The row by which curious peer a knows its own update of round t."""
        return np.eye(1, self.state.shape[1], self.column(t, a))

    def column(self, t: int, v: int) -> int:
        """The unknown that Δ_v(t) is: its own column (t · K + v)."""
        return t * self.ctx.n_peers + v

    def predicted(self, estimate: np.ndarray, t: int, v: int) -> np.ndarray:
        """The attack's estimate of Δ_v(t)."""
        return estimate[self.column(t, v)]

    def _score(self, estimate: np.ndarray, projected: np.ndarray
               ) -> tuple[dict[str, float], dict[int, dict[str, float]]]:
        """The counts over the non-curious peers' updates of the followed rounds in which they sent."""
        tiny, prefix = np.finfo(np.float64).tiny, self.prefix
        known: dict[int, list[bool]] = {v: [] for v in self.targets}
        won: dict[int, list[bool]] = {v: [] for v in self.targets}
        later: dict[int, list[tuple[bool, bool]]] = {v: [] for v in self.targets}  # (known, won) from round 2
        worst: dict[int, float] = {}
        for (t, v), delta in sorted(self.truth.items()):
            if v in self.curious or t > self.options.curious_rounds:
                continue
            guess = self.predicted(estimate, t, v)
            error = float(np.linalg.norm(guess - delta) / max(float(np.linalg.norm(delta)), tiny))
            known[v].append(bool(projected[self.column(t, v)] >= IN_ROW_SPACE))
            won[v].append(error <= self.options.curious_tolerance)
            worst[v] = max(worst.get(v, 0.0), error)
            if t >= FIRST_SEPARABLE:
                later[v].append((known[v][-1], won[v][-1]))
        every = {v for v in self.targets if later[v] and all(w for _, w in later[v])}
        return {f"{prefix}identifiable": float(sum(bool(later[v]) and all(k for k, _ in later[v])
                                                   for v in self.targets)),
                f"{prefix}reconstructed": float(len(every)),
                f"{prefix}reconstructed_non_neighbours": float(len(every.intersection(self.far))),
                f"{prefix}updates_identifiable": float(sum(sum(known[v]) for v in self.targets)),
                f"{prefix}updates_reconstructed": float(sum(sum(won[v]) for v in self.targets)),
                f"{prefix}knowledge_rank": float(self.m.shape[0])}, \
            {v: {f"{prefix}error": worst[v]} for v in self.targets if v in worst}
