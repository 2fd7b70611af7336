"""--gossip decor (Allouah et al., ICML 2024): each peer adds its own small Gaussian noise and, for each neighbour,
noise drawn from the stream the two share, which one adds and the other subtracts, so it cancels over the network;
then the plain W-weighted mix runs --gossip-steps times. The SecLDP accountant of p2pfl.privacy.decor (its docstring:
the definition, the assumptions, the options and the records) is kept on rank 0."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from p2pfl.gossip.schemes import SCHEMES
from p2pfl.gossip.schemes.base import State
from p2pfl.gossip.schemes.noisy import NoisyGossip
from p2pfl.network.schedule import RoundNetwork
from p2pfl.options import opt
from p2pfl.privacy.decor import local_noise, pair_noise, pairs, secldp_rho
from p2pfl.privacy.gaussian import epsilon_at, gaussian_rho
from p2pfl.privacy.gossip_records import MANIFEST_KEY

#: The run folder's file of each peer's ε (at --decor-delta).
PEER_FILE = "decor_eps.npy"


@SCHEMES.register("decor")
class Decor(NoisyGossip):
    """Decor: each peer adds local noise N(0, σ²I) and ± noise shared with each neighbour (cancelling over the
    network) to x − ηg, then the plain W-weighted mix, S times; records the SecLDP ε per peer (docs/privacy.md)."""

    class Options:
        decor_noise: float = opt(0.1, "σ_cor: the std of the pairwise noise two neighbours share, one adding and "
                                      "the other subtracting it (--gossip decor; in the vector's units)",
                                 section="privacy", bounds=">= 0")
        decor_local_noise: float = opt(0.01, "σ: the std of each peer's own Gaussian noise under --gossip decor (in "
                                             "the vector's units)", section="privacy", bounds="> 0")
        decor_sensitivity: float = opt(0.01, "Δ: the L2 sensitivity of a peer's mixed vector to its private data, "
                                             "which the --gossip decor accountant assumes", section="privacy",
                                       bounds="> 0")
        decor_delta: float = opt(1e-5, "δ of the (ε, δ) the --gossip decor accountant records", section="privacy",
                                 bounds="(0, 1)")

    def __init__(self, sigma_cor: float = 0.1, sigma: float = 0.01, sensitivity: float = 0.01,
                 delta: float = 1e-5, seed: int = 0) -> None:
        self.sigma_cor, self.sigma, self.sensitivity, self.delta, self.seed = sigma_cor, sigma, sensitivity, delta, seed
        self.rho: np.ndarray | None = None  # per peer, rounds composed (rank 0)
        self.rounds_noised = 0

    @classmethod
    def from_config(cls, cfg: Any) -> Decor:
        return cls(cfg.decor_noise, cfg.decor_local_noise, cfg.decor_sensitivity, cfg.decor_delta, cfg.seed)

    def prepare(self, ctx: Any) -> None:
        super().prepare(ctx)
        if self.keeps_ledger:
            self.rho = np.zeros(ctx.n_peers)
        ctx.record_manifest(**{MANIFEST_KEY: {
            "mechanism": "decor", "noise": self.sigma_cor, "local_noise": self.sigma, "sensitivity": self.sensitivity,
            "delta": self.delta, "guarantee": "SecLDP (Allouah et al. 2024) against an eavesdropper on every link "
                                              "with no curious peer; rounds composed, no subsampling amplification",
            "assumes": "each pair of neighbours shares a secret (the pair stream) no one else knows; the declared "
                       "sensitivity"}})

    def noise(self, peer: int, like: torch.Tensor, partners: Sequence[int], round: int) -> torch.Tensor:
        """n_i of the module docstring for `peer` in `round`."""
        return (local_noise(self.seed, peer, round, like, self.sigma)
                + pair_noise(self.seed, peer, partners, round, like, self.sigma_cor))

    def noisy(self, vectors: dict[int, torch.Tensor], state: dict[int, State], net: RoundNetwork,
              round: int) -> dict[int, torch.Tensor]:
        partners = pairs(net.adjacency, net.active)
        return {p: v + self.noise(p, v, partners.get(p, []), round) for p, v in vectors.items()}

    def account(self, round: int, net: RoundNetwork) -> None:
        """Add round `round`'s SecLDP cost to every active peer's ρ."""
        assert self.rho is not None
        n = net.n_peers
        adjacency = np.zeros((n, n))
        for i, partners in pairs(net.adjacency, net.active).items():
            adjacency[i, partners] = 1.0
        self.rho += secldp_rho(adjacency, self.sigma, self.sigma_cor, self.sensitivity, honest=sorted(net.active))
        self.rounds_noised += 1

    def metrics(self) -> dict[str, Any]:
        eps = epsilon_at(self.rho, self.delta)
        return {"decor_eps_max": float(np.max(eps)), "decor_eps_mean": float(np.mean(eps))}

    def summary(self) -> dict[str, Any]:
        if self.rho is None:
            return {}
        ldp = epsilon_at(self.rounds_noised * gaussian_rho(self.sensitivity, self.sigma), self.delta)
        return {**self.metrics(), "decor_ldp_eps": float(ldp), "decor_delta": self.delta,
                "decor_peer_eps": PEER_FILE}


    def arrays(self) -> dict[str, np.ndarray]:
        return {} if self.rho is None else {PEER_FILE: epsilon_at(self.rho, self.delta)}


__all__ = ["Decor"]
