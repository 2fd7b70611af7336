"""Local optimisers and learning-rate schedules by name: the registries are the values `--optimizer` and
`--schedule` accept, so adding one here makes it a valid option."""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from p2pfl.config import RunConfig

#: (parameters, config) -> a fresh optimiser at the configured learning rate
OptimizerFactory = Callable[[Iterable[nn.Parameter], "RunConfig"], torch.optim.Optimizer]
#: (base learning rate, round, rounds) -> the learning rate of that round (rounds count from 1)
Schedule = Callable[[float, int, int], float]

OPTIMIZERS: dict[str, OptimizerFactory] = {
    "adam": lambda params, cfg: torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay),
    "sgd": lambda params, cfg: torch.optim.SGD(params, lr=cfg.lr, momentum=local_momentum(cfg),
                                               weight_decay=cfg.weight_decay, nesterov=cfg.nesterov),
    "adamw": lambda params, cfg: torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay),
}


def _cosine(lr: float, round: int, rounds: int) -> float:
    """Half a cosine from lr in round 1 towards 0 after the last round (constant for a single round)."""
    if rounds > 1:
        return lr * 0.5 * (1 + math.cos(math.pi * (round - 1) / rounds))
    return lr


def _step(lr: float, round: int, rounds: int) -> float:
    """The Dec-SSL code's server decay: lr x 0.3 at each of the milestones int(0.3 T), int(0.6 T), int(0.9 T)
    (MultiStepLR over 0-based rounds; with T = 10, rounds 1-3 take lr, 4-6 0.3 lr, 7-9 0.09 lr, 10 0.027 lr)."""
    passed = sum(round - 1 >= int(f * rounds) for f in (0.3, 0.6, 0.9))
    return lr * 0.3 ** passed


SCHEDULES: dict[str, Schedule] = {
    "constant": lambda lr, round, rounds: lr,
    "cosine": _cosine,
    "step": _step,
}


def local_momentum(cfg: RunConfig) -> float:
    """The momentum of the local SGD steps: --momentum, except under a --gossip scheme that owns it (qgm: its μ,
    applied once per round to the whole local update), where the local steps run without momentum, else μ would be
    applied twice."""
    from p2pfl.gossip.schemes import SCHEMES
    from p2pfl.gossip.schemes.base import OWNS_MOMENTUM
    return 0.0 if OWNS_MOMENTUM in SCHEMES.get(cfg.gossip).capabilities else cfg.momentum


def make_optimizer(params: Iterable[nn.Parameter], cfg: RunConfig) -> torch.optim.Optimizer:
    """A fresh `--optimizer` over `params` (lr, momentum, --nesterov and weight decay from the configuration)."""
    return OPTIMIZERS[cfg.optimizer](params, cfg)


def lr_at(cfg: RunConfig, round: int) -> float:
    """The learning rate of `round` under `--schedule`."""
    return SCHEDULES[cfg.schedule](cfg.lr, round, cfg.rounds)
