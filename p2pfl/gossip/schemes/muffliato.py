"""--gossip muffliato (Cyffers et al., NeurIPS 2022): each peer adds Gaussian noise to the vector it mixes, then
the plain W-weighted mix runs --gossip-steps times; the pairwise network-DP ledger of p2pfl.privacy.muffliato (its
docstring: the definition, the assumptions, the options and the records) is kept on rank 0."""
from __future__ import annotations

from typing import Any

import networkx as nx
import numpy as np
import torch

from p2pfl.gossip.schemes import SCHEMES
from p2pfl.gossip.schemes.base import State
from p2pfl.gossip.schemes.noisy import NoisyGossip
from p2pfl.network.schedule import RoundNetwork
from p2pfl.options import opt
from p2pfl.privacy.gaussian import epsilon_at, gaussian_rho
from p2pfl.privacy.gossip_records import MANIFEST_KEY
from p2pfl.privacy.muffliato import MATRIX_FILE, NOISED, PairwiseLedger, by_distance, noise, off_diagonal


@SCHEMES.register("muffliato")
class Muffliato(NoisyGossip):
    """Muffliato: each peer adds N(0, σ²I) to x − ηg (once with --muffliato-once), then the plain W-weighted mix,
    S times; records the pairwise network-DP ledger ε_{u→v} (muffliato_eps.npy; docs/privacy.md)."""

    class Options:
        muffliato_noise: float = opt(0.01, "σ: the std of the Gaussian noise each peer adds to the vector it mixes "
                                           "(--gossip muffliato; in the vector's units, η·σ_g for noise σ_g on a "
                                           "gradient)", section="privacy", bounds="> 0")
        muffliato_sensitivity: float = opt(0.01, "Δ: the L2 sensitivity of a peer's mixed vector to its private "
                                                 "data, which the ledger assumes (--gossip muffliato)",
                                           section="privacy", bounds="> 0")
        muffliato_once: bool = opt(False, "--gossip muffliato adds its noise once, the first round a peer takes "
                                          "part (the paper's averaging), instead of every round (Muffliato-GD)",
                                   section="privacy")
        muffliato_delta: float = opt(1e-5, "δ of the (ε, δ) the --gossip muffliato ledger records",
                                     section="privacy", bounds="(0, 1)")

    def __init__(self, sigma: float = 0.01, sensitivity: float = 0.01, once: bool = False, delta: float = 1e-5,
                 seed: int = 0, steps: int = 1) -> None:
        self.sigma, self.sensitivity, self.once, self.delta = sigma, sensitivity, once, delta
        self.seed, self.steps = seed, steps
        self.ledger: PairwiseLedger | None = None
        self.injections = 0
        self.graph: nx.Graph | None = None

    @classmethod
    def from_config(cls, cfg: Any) -> Muffliato:
        return cls(cfg.muffliato_noise, cfg.muffliato_sensitivity, cfg.muffliato_once, cfg.muffliato_delta,
                   cfg.seed, cfg.gossip_steps)

    def prepare(self, ctx: Any) -> None:
        super().prepare(ctx)
        self.graph = ctx.graph
        if self.keeps_ledger:
            self.ledger = PairwiseLedger(ctx.n_peers, gaussian_rho(self.sensitivity, self.sigma))
        ctx.record_manifest(**{MANIFEST_KEY: {
            "mechanism": "muffliato", "noise": self.sigma, "sensitivity": self.sensitivity, "once": self.once,
            "delta": self.delta, "guarantee": "pairwise network Renyi DP (Cyffers et al. 2022): an upper bound on "
                                              "the exact divergence of v's whole linear Gaussian view, every noise "
                                              "draw over every later gossip step (p2pfl.privacy.muffliato)",
            "assumes": "honest-but-curious peers that do not collude; the declared sensitivity"}})

    def noisy(self, vectors: dict[int, torch.Tensor], state: dict[int, State], net: RoundNetwork,
              round: int) -> dict[int, torch.Tensor]:
        """Each vector with its peer's noise, unless --muffliato-once and the peer has added it."""
        out = {}
        for p, v in vectors.items():
            if self.once and NOISED in state[p]:
                out[p] = v
                continue
            if self.once:
                state[p][NOISED] = torch.ones(1)
            out[p] = v + noise(self.seed, p, round, v, self.sigma)
        return out

    def account(self, round: int, net: RoundNetwork) -> None:
        """Fresh noise (every round, or round 1 under --muffliato-once), then the round's S gossip steps (every
        earlier draw is observed through them too: the ledger's view spans the whole run)."""
        assert self.ledger is not None
        if not self.once or round == 1:
            self.ledger.inject()
            self.injections += 1
        W, hears = net.W.toarray(), net.adjacency.toarray() != 0
        for _ in range(self.steps):
            self.ledger.step(W, hears)

    def metrics(self) -> dict[str, Any]:
        assert self.ledger is not None
        eps = off_diagonal(epsilon_at(self.ledger.rho, self.delta))
        return {"muffliato_eps_max": float(eps.max()), "muffliato_eps_mean": float(eps.mean())}

    def summary(self) -> dict[str, Any]:
        if self.ledger is None:
            return {}
        ldp = epsilon_at(self.injections * self.ledger.scale, self.delta)
        return {**self.metrics(), "muffliato_ldp_eps": float(ldp), "muffliato_delta": self.delta,
                "muffliato_ledger": self.ledger.mode,
                "muffliato_eps_by_distance": by_distance(epsilon_at(self.ledger.rho, self.delta), self.graph),
                "muffliato_matrix": MATRIX_FILE}

    def arrays(self) -> dict[str, np.ndarray]:
        return {} if self.ledger is None else {MATRIX_FILE: epsilon_at(self.ledger.rho, self.delta)}
