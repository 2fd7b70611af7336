"""FedMuscle's alignment losses by name (``--loss``): the anchor's representations against the others'."""
from __future__ import annotations

import torch

from p2pfl.losses.gram import GRAM_DEFAULT_TAU, gram_loss
from p2pfl.losses.infonce import pairwise_infonce
from p2pfl.losses.muscle import MUSCLE_TAU, MUSCLE_TAU_PREV, muscle_loss

#: GRAM's training code smooths its labels by 0.1 (reference notes §C.3).
GRAM_LABEL_SMOOTHING = 0.1

ALIGNMENT_LOSSES = {
    "muscle": lambda anchor, others: muscle_loss(anchor, others, tau=MUSCLE_TAU, tau_prev=MUSCLE_TAU_PREV),
    "pairwise": lambda anchor, others: pairwise_infonce(anchor, others, tau=MUSCLE_TAU),
    "gram": lambda anchor, others: gram_loss(anchor, others, tau=GRAM_DEFAULT_TAU,
                                             label_smoothing=GRAM_LABEL_SMOOTHING),
}


def align_loss(kind: str, anchor: torch.Tensor, others: torch.Tensor) -> torch.Tensor:
    """The alignment loss ``kind`` of the anchor (B, d) against the others (M, B, d), constants."""
    if kind not in ALIGNMENT_LOSSES:
        raise ValueError(f"--loss: unknown value {kind!r}; allowed: {', '.join(ALIGNMENT_LOSSES)}")
    return ALIGNMENT_LOSSES[kind](anchor, others)
