"""Quasi-global momentum (Lin et al. 2021): send x − η(μm + g) and mix, X⁺ = W X½, then
M⁺ = μM + (1 − μ)(X − X⁺)/η, M₀ = 0 (state "m"): momentum on the network's progress, not the peer's own gradient.

μ is --momentum, applied once a round to the whole local update: the local SGD steps run without momentum
(p2pfl.optim.local_momentum asks for OWNS_MOMENTUM), else μ would be applied twice."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from p2pfl.gossip.mix import Gossip, Mixed
from p2pfl.gossip.rules import Rule
from p2pfl.gossip.schemes import SCHEMES
from p2pfl.gossip.schemes.base import OWNS_MOMENTUM, Scheme, State
from p2pfl.network.schedule import RoundNetwork
from p2pfl.options import Check


@SCHEMES.register("qgm")
class QGM(Scheme):
    """QGM with μ = --momentum in [0, 1), over plain SGD steps."""

    capabilities: ClassVar[frozenset[str]] = frozenset({OWNS_MOMENTUM})
    paper: ClassVar[str | None] = "Lin et al. 2021, Quasi-global momentum"

    def __init__(self, mu: float = 0.9) -> None:
        self.mu = mu

    @classmethod
    def from_config(cls, cfg: Any) -> QGM:
        return cls(cfg.momentum)

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        super().check(cfg, check)
        check(cfg.optimizer == "sgd", "optimizer",
              f"--gossip qgm is quasi-global momentum over plain SGD steps; use --optimizer sgd, not {cfg.optimizer}")
        check(0 <= cfg.momentum < 1, "momentum", f"qgm's μ must lie in [0, 1), got {cfg.momentum}")
        check(not cfg.nesterov, "nesterov", "--gossip qgm's local steps take no momentum (--momentum is its own μ, "
                                            "applied once a round): run it without --nesterov")

    def prepare(self, ctx: Any) -> None:
        ctx.record_manifest(qgm={"mu": self.mu, "local_momentum": 0.0})

    def round(self, gossip: Gossip, x: dict[int, torch.Tensor], g: dict[int, torch.Tensor], lr: float,
              state: dict[int, State], net: RoundNetwork, round: int, sizes: Sequence[float] | None = None) -> Mixed:
        mu = self.mu
        m = {p: state[p].get("m", torch.zeros_like(x[p])) for p in x}
        mixed = gossip.combine({p: x[p] - lr * (mu * m[p] + g[p]) for p in x}, net, round, Rule(sizes))
        for p in x:
            state[p]["m"] = mu * m[p] + (1 - mu) * (x[p] - mixed.vectors[p]) / lr
        return mixed
