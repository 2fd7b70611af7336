"""An attack of one's own, as a plug-in: each coordinate's sign flipped at random.

    python -m p2pfl.run --plugin examples/plugins/attack.py --byzantine 1 --attack random-sign --flip-prob 0.5 ...

An attacker sends s·(m ⊙ x) instead of its x, m_l = −1 with probability p (--flip-prob) and +1 otherwise, drawn
afresh each round from its own stream (seed, peer, "attack/t"), so every rank draws the same mask (s:
--attack-scale). p = 1 is the built-in sign-flip, −s·x; smaller p hides the attack in a vector whose norm is the
attacker's own. An attack made on the attacker's side is an `Attack` registered with ``@ATTACKS.register``: the
run makes one with its `Options` as it holds them (`self.options`), calls `send` for each vector the attacker
sends, and `remember` (not needed here) for what later rounds read back as `first`. One tailored to each receiver
from its inbox subclasses `Omniscient` instead (`message`).
"""
from __future__ import annotations

import torch

from p2pfl.byzantine.attacks import ATTACKS, Attack
from p2pfl.options import opt
from p2pfl.seeding import torch_generator


@ATTACKS.register("random-sign")
class RandomSign(Attack):
    """s·(m ⊙ x), m_l = −1 with probability --flip-prob."""

    class Options:
        flip_prob: float = opt(0.5, "random-sign: probability that a coordinate's sign is flipped",
                               section="byzantine", bounds="(0, 1]")

    def send(self, x: torch.Tensor, *, seed: int, peer: int, round: int, scale: float,
             first: torch.Tensor | None = None) -> torch.Tensor:
        gen = torch_generator(seed, peer, f"attack/{round}", x.device)
        flip = torch.rand(x.shape, generator=gen, device=x.device, dtype=torch.float64) < self.options.flip_prob
        return scale * torch.where(flip, -x, x)
