"""Gossip averaging of random vectors: the runtime's own check against the spectral theory (SPEC §1–§2).

Every peer starts from a seeded random vector and mixes it with its neighbours each round. Under a doubly
stochastic W the average is preserved and the consensus distance falls like |λ2|^(2t).
"""
from __future__ import annotations

import torch

from p2pfl.gossip import exact_mean, gossip
from p2pfl.rounds import Algorithm, RunContext
from p2pfl.seeding import torch_generator


class Consensus(Algorithm):
    name = "consensus"
    headline = "consensus"

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.x: dict[int, torch.Tensor] = {}
        self.initial_mean: torch.Tensor | None = None

    def setup(self) -> None:
        size = self.cfg.vector_size
        for peer in self.ctx.local_peers:
            gen = torch_generator(self.cfg.seed, peer, "init")
            self.x[peer] = torch.randn(size, generator=gen).to(self.ctx.device)
        self.initial_mean = exact_mean(self.ctx.world, self.x, self.ctx.n_peers)

    def communicate(self, round: int, active: set[int]) -> None:
        self.x.update(gossip(self.ctx.exchange, self.ctx.W, self.x, round, active))

    def consensus_vectors(self) -> dict[int, torch.Tensor]:
        return self.x

    def evaluate(self, round: int, final: bool) -> tuple[dict[str, float], dict[int, dict[str, float]]]:
        mean = exact_mean(self.ctx.world, self.x, self.ctx.n_peers)
        assert self.initial_mean is not None
        shift = float((mean - self.initial_mean).norm() / self.initial_mean.norm())
        per_peer = {p: {"distance_to_mean": float((v.double().cpu() - mean).norm() / mean.norm())}
                    for p, v in self.x.items()}
        return {"mean_shift": shift}, per_peer
