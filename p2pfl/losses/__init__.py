"""Losses of p2pfl: SimCLR NT-Xent (Dec-SSL), MOON's model-contrastive term, and the FedMuscle family
(the exact Muscle loss, pairwise InfoNCE, GRAM) and its registry of alignment losses by name."""
from .align import ALIGN_LOSSES, GRAM_LABEL_SMOOTHING, align_loss
from .gram import GRAM_DEFAULT_TAU, gram_loss, gram_volumes
from .infonce import infonce, pairwise_infonce
from .moon import moon_contrastive
from .muscle import (
    DEFAULT_MAX_ELEMENTS,
    MUSCLE_TAU,
    MUSCLE_TAU_PREV,
    muscle_loss,
    muscle_loss_naive,
)
from .simclr import nt_xent

__all__ = [
    "ALIGN_LOSSES",
    "GRAM_LABEL_SMOOTHING",
    "align_loss",
    "nt_xent",
    "moon_contrastive",
    "infonce",
    "pairwise_infonce",
    "gram_loss",
    "gram_volumes",
    "GRAM_DEFAULT_TAU",
    "muscle_loss",
    "muscle_loss_naive",
    "MUSCLE_TAU",
    "MUSCLE_TAU_PREV",
    "DEFAULT_MAX_ELEMENTS",
]
