"""alie (A Little Is Enough, Baruch et al. 2019; decentralised as in He, Karimireddy and Jaggi 2022): μ_i − z·σ_i,
μ_i and σ_i the coordinate-wise mean and population standard deviation of receiver i's own vector and the vectors
its honest neighbours sent this round (own included, as the published ClippedGossip code does: i's vector is an
honest one it combines with, and a receiver whose neighbours are all attackers gets its own vector back).
z = Φ⁻¹((n − s)/n) with s = ⌊n/2 + 1⌋ − f supporters, n all peers of the network and f the Byzantine ones
(Baruch's z_max; the ClippedGossip code's variant (n − f − s)/(n − f) is not used). Defined for f ≤ n/2 (s ≥ 1).
--attack-scale is not used."""
from __future__ import annotations

import math
from collections.abc import Collection
from statistics import NormalDist
from typing import Any

import torch

from p2pfl.byzantine.attacks import ATTACKS, Omniscient
from p2pfl.byzantine.robust import choose_byzantine
from p2pfl.options import Check


@ATTACKS.register("alie")
class Alie(Omniscient):
    """μ − z·σ of the receiver's honest neighbourhood."""

    paper = "Baruch et al. 2019"

    def __init__(self, byzantine: Collection[int], n_peers: int, scale: float) -> None:
        super().__init__(byzantine, n_peers, scale)
        self.z = alie_z(n_peers, len(self.byzantine))

    @classmethod
    def check_resolved(cls, cfg: Any, check: Check) -> None:
        """z is defined for at most half the peers attacking (`alie_z`): refused once the peer count is known."""
        if cfg.byzantine is None:
            return
        attackers = len(choose_byzantine(cfg.byzantine, cfg.peers, cfg.seed))
        check(attackers <= cfg.peers // 2, "attack",
              f"alie is defined for at most {cfg.peers // 2} attackers among {cfg.peers} peers, got {attackers}")

    def message(self, own: torch.Tensor, received: dict[int, torch.Tensor], row: list[tuple[int, float]]
                ) -> torch.Tensor:
        honest = [received[j] for j in sorted(received) if j not in self.byzantine]
        return alie_message(own, honest, self.z)


def alie_z(n: int, f: int) -> float:
    """Baruch et al.'s z for `f` attackers among `n` peers: Φ⁻¹((n − s)/n), s = ⌊n/2 + 1⌋ − f the honest
    supporters the attackers need. ValueError unless 1 ≤ s < n: f > n/2 needs no supporter (z unbounded), and
    f = 0 among 2 peers gives Φ⁻¹(0)."""
    s = math.floor(n / 2 + 1) - f
    if not 1 <= s < n:
        raise ValueError(f"--attack alie: {f} attackers among {n} peers; ALIE is defined for 1 to {n // 2}")
    return NormalDist().inv_cdf((n - s) / n)


def alie_message(own: torch.Tensor, honest: list[torch.Tensor], z: float) -> torch.Tensor:
    """μ − z·σ over `own` and the `honest` vectors (coordinate-wise, population σ), accumulated in float64 in
    the given order."""
    vectors = [own, *honest]
    mean = torch.zeros_like(own, dtype=torch.float64)
    for v in vectors:
        mean.add_(v)
    mean.div_(len(vectors))
    var, diff = torch.zeros_like(mean), torch.empty_like(mean)
    for v in vectors:
        torch.sub(v, mean, out=diff)
        var.addcmul_(diff, diff)
    return mean.sub_(var.div_(len(vectors)).sqrt_(), alpha=z).to(own.dtype)
