"""Reconstruction of private values from gossip averaging (El Mrini, Cyffers, Bellet, "Privacy Attacks in
Decentralized Learning", ICML 2024, §3): colluding curious peers know W and every message their neighbours send
them. Under the plain mix x(t) = W_t x(t−1), the message peer j sends in round t is x_j(t−1) = (P_{t−1} x(0))_j
with P_t = W_t ⋯ W_1 (P_0 = I): a known linear combination of the initial private values. Stacking the curious
peers' own values (rows e_a) and every observed message (rows P_{t−1}[j]) gives the knowledge matrix M with
M x(0) = y. Peer v's value is identifiable exactly when e_v lies in the row space of M (the paper's condition);
the attack estimates x(0) by the minimum-norm least-squares solution of M x = y, which is x_v on every identifiable
v (non-neighbours of the curious peers included). Each evaluation records the counts (`curious_identifiable`,
`curious_reconstructed`, `curious_reconstructed_non_neighbours`, `curious_knowledge_rank`) and, per non-curious
peer, the estimate's relative error (`per_peer`: `curious_error`).

The attack keeps `--curious-coords` coordinates of each message (every coordinate solves the same system) and,
after each evaluation, replaces (M, y) by (S V_rᵀ, U_rᵀ y) from the SVD M = U S Vᵀ (same row space, same
solution), so it holds at most K + the new messages' rows. Rank r counts singular values above
σ_max · max(m, K) · ε (float64). Rank 0 holds the system; the other ranks only forward what their curious
receivers saw.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from p2pfl.capabilities import GIVES_GRADIENTS, MIXES_BY_W
from p2pfl.curious import CURIOUS, CuriousAttack, Inbox
from p2pfl.network import RoundNetwork
from p2pfl.options import Check, catalogue, opt

#: The attack holds P_t, K × K floats: the peers it accepts.
MAX_PEERS = 2048
#: e_v lies in the row space when its projection keeps this much of its unit length.
IN_ROW_SPACE = 1 - 1e-6


def knowledge_solve(m: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The system M x = y reduced by the SVD: (S_r V_rᵀ, U_rᵀ y), the minimum-norm solution x̂ (K × coords) and
    each column's squared projection on the row space (1 where e_v lies in it)."""
    u, s, vt = np.linalg.svd(m, full_matrices=False)
    rank = int((s > s.max(initial=0.0) * max(m.shape) * np.finfo(np.float64).eps).sum()) if s.size else 0
    u, s, vt = u[:, :rank], s[:rank], vt[:rank]
    uy = u.T @ y
    x = vt.T @ (uy / s[:, None])
    return s[:, None] * vt, uy, x, (vt ** 2).sum(axis=0)


@CURIOUS.register("reconstruction")
class Reconstruction(CuriousAttack):
    """The curious peers reconstruct initial values of gossip averaging (`consensus`) from the messages they get."""

    paper = "El Mrini, Cyffers, Bellet, ICML 2024"

    class Options:
        curious_coords: int = opt(4, "reconstruction: coordinates of each message the curious peers keep (each "
                                     "solves the same linear system)", section="curious", bounds=">= 1")
        curious_tolerance: float = opt(1e-6, "reconstruction: a peer counts as reconstructed when the estimate's "
                                             "relative L2 error on the kept coordinates is at most this",
                                       section="curious", bounds="> 0")

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        """The messages must be the plain W-mix of the initial values: a method that mixes by W and trains nothing,
        the plain mix once a round, exact messages, no attackers and no server."""
        super().check(cfg, check)
        if cfg.curious is None:
            return
        cls.check_method(cfg, check)
        from p2pfl.gossip.compress import CODECS
        from p2pfl.gossip.schemes import SCHEMES
        from p2pfl.gossip.schemes.base import PLAIN_MIX
        name = cls.name
        check(PLAIN_MIX in SCHEMES.get(cfg.gossip).capabilities and cfg.gossip_steps == 1, "curious_attack",
              f"{name} follows the plain mix, once a round (--gossip average, --gossip-steps 1)")
        check("dense" in CODECS.get(cfg.compress).capabilities, "curious_attack",
              f"{name} reads exact messages: not with --compress")
        check(cfg.byzantine is None and cfg.mixing != "server", "curious_attack",
              f"{name} assumes the schedule's W: not with --byzantine or --mixing server")

    @classmethod
    def check_method(cls, cfg: Any, check: Check) -> None:
        """The method's messages are what the attack models: here a method that mixes by W and trains nothing."""
        method = catalogue().get(cfg.algorithm, cfg)
        check(method.can(MIXES_BY_W) and not method.can(GIVES_GRADIENTS), "curious_attack",
              f"reconstruction reads gossip averaging (a method that mixes by W and trains nothing), "
              f"not {cfg.algorithm}")

    @classmethod
    def check_resolved(cls, cfg: Any, check: Check) -> None:
        super().check_resolved(cfg, check)
        if cfg.curious is not None:
            check(cfg.peers <= MAX_PEERS, "curious_attack",
                  f"reconstruction holds K × K coefficients: at most {MAX_PEERS} peers, got {cfg.peers}")

    def __init__(self, ctx: Any, algorithm: Any, curious: frozenset[int], options: Any) -> None:
        super().__init__(ctx, algorithm, curious, options)
        k = options.curious_coords
        vectors = algorithm.consensus_vectors() or {}
        mine = {p: v.detach().reshape(-1)[:k].double().cpu().numpy() for p, v in vectors.items()}
        parts = ctx.world.gather(mine)  # the private values, to score the attack (the attackers know their own)
        self.seen: dict[tuple[int, int], np.ndarray] = {}  # (round, sender) -> its message, kept coordinates
        self.done = 0  # the last round whose messages the system holds
        if parts is None:
            return
        n = ctx.n_peers
        self.truth = np.stack([next(part[p] for part in parts if p in part) for p in range(n)])
        self.coefficients = np.eye(n)  # P_done
        own = sorted(curious)
        self.m, self.y = np.eye(n)[own], self.truth[own]
        neighbours = {q for a in curious for q in ctx.graph.neighbors(a)} - curious
        self.targets = [v for v in range(n) if v not in curious]
        self.far = [v for v in self.targets if v not in neighbours]

    def observe(self, round: int, inbox: Inbox) -> None:
        k = self.options.curious_coords
        for receiver in sorted(self.curious.intersection(inbox)):
            for sender, message in inbox[receiver].items():
                if (round, sender) not in self.seen:
                    # a copy: float64 messages would otherwise be views of buffers the exchange reuses
                    self.seen[(round, sender)] = message.detach().reshape(-1)[:k].double().cpu().numpy().copy()

    def evaluate(self, round: int, final: bool, net: RoundNetwork
                 ) -> tuple[dict[str, float], dict[int, dict[str, float]]]:
        parts = self.ctx.world.gather(self.seen)
        self.seen = {}
        if parts is None:
            return {}, {}
        seen = {key: v for part in parts for key, v in part.items()}
        rows, values = [self.m], [self.y]
        for t in range(self.done + 1, round + 1):
            senders = sorted(j for (r, j) in seen if r == t)
            if senders:
                rows.append(self.coefficients[senders])
                values.append(np.stack([seen[(t, j)] for j in senders]))
            self.coefficients = mixing(self.ctx.schedule.at(t)) @ self.coefficients
        self.done = round
        self.m, self.y, estimate, projected = knowledge_solve(np.concatenate(rows), np.concatenate(values))
        error = (np.linalg.norm(estimate - self.truth, axis=1)
                 / np.maximum(np.linalg.norm(self.truth, axis=1), np.finfo(np.float64).tiny))
        won = {v for v in self.targets if error[v] <= self.options.curious_tolerance}
        return {"curious_identifiable": float(sum(projected[v] >= IN_ROW_SPACE for v in self.targets)),
                "curious_reconstructed": float(len(won)),
                "curious_reconstructed_non_neighbours": float(len(won.intersection(self.far))),
                "curious_knowledge_rank": float(self.m.shape[0])}, \
            {v: {"curious_error": float(error[v])} for v in self.targets}


def mixing(net: RoundNetwork) -> sp.csr_matrix:
    """The round's W as the plain mix applies it: each row normalised as `RoundNetwork.row` normalises it."""
    w = net.W
    return sp.csr_matrix((net.row_weights, w.indices, w.indptr), shape=w.shape)
