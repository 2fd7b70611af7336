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


def align_loss(kind: str, anchor: torch.Tensor, others: torch.Tensor) -> torch.Tensor:
    """The alignment loss ``kind`` of the anchor (B, d) against the others (M, B, d), constants."""
    if kind not in ALIGN_LOSSES:
        raise ValueError(f"--loss: unknown value {kind!r}; allowed: {', '.join(ALIGN_LOSSES)}")
    return ALIGN_LOSSES[kind](anchor, others)
