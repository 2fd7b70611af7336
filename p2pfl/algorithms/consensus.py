"""Gossip averaging of random vectors: the runtime's own check against the spectral theory (SPEC §1–§2).

Every peer starts from a seeded random vector and mixes it with its neighbours each round. Under a doubly
stochastic W the average is preserved and the consensus distance falls like |λ2|^(2t).
"""
from __future__ import annotations

import torch

from p2pfl.algorithms.peer import ConsensusPeer
from p2pfl.gossip import exact_mean, gossip
from p2pfl.rounds import Algorithm, RunContext
from p2pfl.seeding import torch_generator


class Consensus(Algorithm):
    name = "consensus"
    headline = "consensus"

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.peers: dict[int, ConsensusPeer] = {}
        self.initial_mean: torch.Tensor | None = None

    def setup(self) -> None:
        size = self.cfg.vector_size
        for p in self.ctx.local_peers:
            gen = torch_generator(self.cfg.seed, p, "init")
            self.peers[p] = ConsensusPeer(id=p, x=torch.randn(size, generator=gen).to(self.ctx.device))
        self.initial_mean = exact_mean(self.ctx.world, self.consensus_vectors(), self.ctx.n_peers)

    def communicate(self, round: int, active: set[int]) -> None:
        for p, x in gossip(self.ctx.exchange, self.ctx.W, self.consensus_vectors(), round, active).items():
            self.peers[p].x = x

    def consensus_vectors(self) -> dict[int, torch.Tensor]:
        return {p: peer.x for p, peer in self.peers.items()}

    def evaluate(self, round: int, final: bool) -> tuple[dict[str, float], dict[int, dict[str, float]]]:
        mean = exact_mean(self.ctx.world, self.consensus_vectors(), self.ctx.n_peers)
        assert self.initial_mean is not None
        shift = float((mean - self.initial_mean).norm() / self.initial_mean.norm())
        per_peer = {p: {"distance_to_mean": float((peer.x.double().cpu() - mean).norm() / mean.norm())}
                    for p, peer in self.peers.items()}
        return {"mean_shift": shift}, per_peer
