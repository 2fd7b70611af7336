"""An example plug-in decentralised optimiser: D-PSGD with a local heavy-ball buffer (`--gossip heavy-ball`).

Each peer keeps a momentum buffer v of its own gradients, which never travels, and gossips the step it takes:

    v⁺ = β v + g,    x⁺ = Σ_j W_ij (x_j − η v⁺_j),    v₀ = 0,    β = --heavy-ball-beta in [0, 1)

(β = 0 is D-PSGD, `--gossip average`, bit for bit). Unlike qgm's quasi-global momentum, the buffer follows the
peer's own gradients, not the network's progress; unlike local SGD momentum inside the learners' optimiser, it
acts once a round on the whole update G, so it runs on the quadratic problem too.

    python -m p2pfl.run --plugin examples/plugins/optimiser.py --algorithm quadratic --gossip heavy-ball \
        --heavy-ball-beta 0.5 --peers 8 --rounds 50

Everything a scheme is lives here: its option (a flag, a YAML key, `cfg.heavy_ball_beta`), its rule on the rest of
the configuration (`check`), its state (the peer record's dict, so checkpoints keep it) and its round; nothing in
p2pfl is edited (docs/extending.md).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from p2pfl.gossip.mix import Gossip, Mixed
from p2pfl.gossip.rules import Rule
from p2pfl.gossip.schemes import SCHEMES, Scheme
from p2pfl.network.schedule import RoundNetwork
from p2pfl.options import Check, opt


@SCHEMES.register("heavy-ball")
class HeavyBall(Scheme):
    """D-PSGD on a local heavy-ball step: the peers mix x − η(βv + g) by W."""

    class Options:
        heavy_ball_beta: float = opt(0.9, "heavy-ball's momentum β of the local buffer v⁺ = βv + g (--gossip "
                                          "heavy-ball)", section="heavy-ball", bounds="[0, 1)")

    def __init__(self, beta: float = 0.9) -> None:
        self.beta = beta

    @classmethod
    def from_config(cls, cfg: Any) -> HeavyBall:
        return cls(cfg.heavy_ball_beta)

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        super().check(cfg, check)  # the method hands it models and gradients; no robust mix, no async
        check(cfg.optimizer == "sgd", "optimizer",
              f"--gossip heavy-ball adds momentum to plain SGD steps; use --optimizer sgd, not {cfg.optimizer}")

    def prepare(self, ctx: Any) -> None:
        ctx.record_manifest(heavy_ball={"beta": self.beta})

    def round(self, gossip: Gossip, x: dict[int, torch.Tensor], g: dict[int, torch.Tensor], lr: float,
              state: dict[int, dict[str, torch.Tensor]], net: RoundNetwork, round: int,
              sizes: Sequence[float] | None = None) -> Mixed:
        for p in x:
            v = state[p].get("v")
            state[p]["v"] = g[p].clone() if v is None else self.beta * v + g[p]
        return gossip.combine({p: x[p] - lr * state[p]["v"] for p in x}, net, round, Rule(sizes))
