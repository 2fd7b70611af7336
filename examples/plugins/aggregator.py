"""A robust aggregator of one's own, as a plug-in: the geometric median of the closed neighbourhood.

    python -m p2pfl.run --plugin examples/plugins/aggregator.py --aggregator geometric-median \
        --weiszfeld-steps 8 --byzantine 1 ...

An honest peer combines its own vector and those its neighbours sent into y ≈ argmin_y Σ_j ‖x_j − y‖ (unweighted:
the geometric median, robust while fewer than half of the vectors are an attacker's), by Weiszfeld's iteration
from the coordinate-wise mean: y ← Σ_j x_j / max(‖x_j − y‖, ε) / Σ_j 1 / max(‖x_j − y‖, ε), --weiszfeld-steps
times (ε = 1e-12 keeps a step defined when y meets an x_j). The vectors are taken in peer order (own first), so
the result does not depend on the ranks. It cuts the neighbours farther from y than --weiszfeld-cut times the
median distance (0: none). An aggregator is an `Aggregator` registered with ``@AGGREGATORS.register``;
`aggregate` combines (its own options arrive in `robust.options`), `Options` declares its flags, `check` its
rules on the rest of the run, `assumed` (not needed here) how many attackers a small neighbourhood lowers --trim to.
"""
from __future__ import annotations

from typing import Any

import torch

from p2pfl.byzantine.aggregators import AGGREGATORS, Aggregator
from p2pfl.byzantine.robust import Robust, Scratch
from p2pfl.options import Check, opt

EPS = 1e-12


@AGGREGATORS.register("geometric-median")
class GeometricMedian(Aggregator):
    """Weiszfeld's approximation of the closed neighbourhood's geometric median."""

    paper = "Weiszfeld 1937; Pillutla, Kakade and Harchaoui 2022 (RFA)"

    class Options:
        weiszfeld_steps: int = opt(8, "geometric-median: Weiszfeld iterations from the coordinate-wise mean",
                                   section="byzantine", bounds=">= 1")
        weiszfeld_cut: float = opt(0.0, "geometric-median: cut the neighbours farther than this many times the "
                                        "median distance from the result (0: none)", section="byzantine",
                                   bounds=">= 0")

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        check(cfg.weiszfeld_cut == 0 or cfg.weiszfeld_cut >= 1, "weiszfeld_cut",
              f"cuts beyond the median distance: 0 or >= 1, got {cfg.weiszfeld_cut}")

    @classmethod
    def aggregate(cls, robust: Robust, peer: int, own: torch.Tensor, received: dict[int, torch.Tensor],
                  row: list[tuple[int, float]], scratch: Scratch | None) -> tuple[torch.Tensor, list[int]]:
        steps, cut = robust.options["weiszfeld_steps"], robust.options["weiszfeld_cut"]
        senders = sorted(received)
        y, distances = geometric_median([own, *(received[j] for j in senders)], steps)
        if not cut or not senders:
            return y, []
        middle = float(distances.median())
        return y, [j for j, dist in zip(senders, distances[1:].tolist()) if dist > cut * middle]


def geometric_median(vectors: list[torch.Tensor], steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Weiszfeld's y after `steps` iterations from the mean, and each vector's distance to it."""
    stack = torch.stack([v.reshape(-1) for v in vectors])
    y = stack.mean(dim=0)
    for _ in range(steps):
        weights = 1.0 / torch.linalg.vector_norm(stack - y, dim=1).clamp_min(EPS)
        y = (weights[:, None] * stack).sum(dim=0) / weights.sum()
    return y.reshape(vectors[0].shape), torch.linalg.vector_norm(stack - y.reshape(-1), dim=1)

