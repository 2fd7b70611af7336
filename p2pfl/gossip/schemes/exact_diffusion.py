"""Exact diffusion (Yuan et al. 2019): D²'s round mixed by W̃ = (W + I)/2, which runs on any W D² refuses (its
λ_min is >= 0). Exact only under a doubly stochastic W."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import torch

from p2pfl.gossip.rules import Rule
from p2pfl.gossip.schemes import SCHEMES
from p2pfl.gossip.schemes.base import DOUBLY_STOCHASTIC
from p2pfl.gossip.schemes.d2 import Diffusion
from p2pfl.network.schedule import RoundNetwork


class Lazy(Rule):
    """Exact diffusion's W̃ = (W + I)/2: x_i <- (x_i + Σ_j W_ij x_j) / 2."""

    def combine(self, peer: int, own: torch.Tensor, received: dict[int, torch.Tensor], net: RoundNetwork
                ) -> tuple[torch.Tensor, list[int]]:
        mixed, _ = super().combine(peer, own, received, net)
        return mixed.add_(own).mul_(0.5), []

    def combine_all(self, own: Mapping[int, torch.Tensor], inbox: Mapping[int, dict[int, torch.Tensor]],
                    net: RoundNetwork) -> dict[int, tuple[torch.Tensor, list[int]]]:
        return {p: (mixed.add_(own[p]).mul_(0.5), []) for p, (mixed, _) in super().combine_all(own, inbox, net).items()}


@SCHEMES.register("exact-diffusion")
class ExactDiffusion(Diffusion):
    """D² with the lazy rule."""

    capabilities: ClassVar[frozenset[str]] = frozenset({DOUBLY_STOCHASTIC})

    def rule(self, sizes: Sequence[float] | None) -> Rule:
        return Lazy(sizes)
