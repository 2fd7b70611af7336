"""FedMuscle's alignment losses by name (`--loss`), each bound to the constants of its reference code.

A loss takes the anchor (B, d) and the others (M, B, d), held constant, and returns a scalar. The registry is
the set of values `--loss` accepts, so registering a loss here makes it a valid option.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from .gram import GRAM_DEFAULT_TAU, gram_loss
from .infonce import pairwise_infonce
from .muscle import MUSCLE_TAU, MUSCLE_TAU_PREV, muscle_loss

#: GRAM's training code smooths its labels by 0.1 (reference notes §C.3).
GRAM_LABEL_SMOOTHING = 0.1

AlignLoss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

#: name -> loss with its temperature (and GRAM's label smoothing) bound; `.keywords` lists the constants
ALIGN_LOSSES: dict[str, AlignLoss] = {
    "muscle": partial(muscle_loss, tau=MUSCLE_TAU, tau_prev=MUSCLE_TAU_PREV),
    "pairwise": partial(pairwise_infonce, tau=MUSCLE_TAU),
    "gram": partial(gram_loss, tau=GRAM_DEFAULT_TAU, label_smoothing=GRAM_LABEL_SMOOTHING),
}


#: Each loss's temperature in its reference code, and Muscle's tau_prev as a fraction of its tau (0.15 / 0.2).
REFERENCE_TAU = {"muscle": MUSCLE_TAU, "pairwise": MUSCLE_TAU, "gram": GRAM_DEFAULT_TAU}
TAU_PREV_RATIO = MUSCLE_TAU_PREV / MUSCLE_TAU


def align_temperatures(kind: str, tau: float | None = None, tau_prev: float | None = None) -> dict[str, float]:
    """The temperatures loss `kind` runs at: `tau` (its reference value when None) and, for muscle, `tau_prev`
    (when None: the reference 0.15 at the reference tau, else TAU_PREV_RATIO x tau)."""
    if kind not in ALIGN_LOSSES:
        raise ValueError(f"--loss: unknown value {kind!r}; allowed: {', '.join(ALIGN_LOSSES)}")
    out = {"tau": REFERENCE_TAU[kind] if tau is None else float(tau)}
    if kind == "muscle":
        scaled = MUSCLE_TAU_PREV if tau is None else out["tau"] * TAU_PREV_RATIO
        out["tau_prev"] = scaled if tau_prev is None else float(tau_prev)
    return out


def align_loss(kind: str, anchor: torch.Tensor, others: torch.Tensor, tau: float | None = None,
               tau_prev: float | None = None) -> torch.Tensor:
    """The alignment loss ``kind`` of the anchor (B, d) against the others (M, B, d), constants, at the
    temperatures `align_temperatures` resolves."""
    return ALIGN_LOSSES[kind](anchor, others, **align_temperatures(kind, tau, tau_prev))


def anchor_gradient_cosine(anchor: torch.Tensor, others: torch.Tensor, kind: str, reference: str = "pairwise",
                           tau: float | None = None, tau_prev: float | None = None,
                           grad: torch.Tensor | None = None) -> float:
    """cos(∇_anchor L_kind, ∇_anchor L_reference) at the same anchor and others (on a detached copy of the
    anchor; the peer's graph is untouched): how far loss `kind` steers the anchor away from `reference`.
    `grad`: ∇_anchor L_kind when the caller already has it (training computes it anyway)."""
    grads = []
    for name in (kind, reference):
        if name == kind and grad is not None:
            grads.append(grad.detach().flatten())
            continue
        a = anchor.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            (g,) = torch.autograd.grad(align_loss(name, a, others.detach(), tau, tau_prev), a)
        grads.append(g.flatten())
    return float(torch.nn.functional.cosine_similarity(grads[0], grads[1], dim=0))
