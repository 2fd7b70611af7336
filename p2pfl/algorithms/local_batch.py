"""What a method's loss sees of a local step, and what runs the step: the one local loop
(`LocalTrainer.train_group`) drives either a peer alone (`p2pfl.algorithms.trainer.OnePeer`) or co-located peers
stacked into one computation (`p2pfl.algorithms.batched.StackedRun`, --batch-peers) through `LocalRun`.

A method states its loss once, in `LocalTrainer.local_loss(batch)`, on a `PeerBatch`: the step's batch of the
peers that train together (one, or several when the method declares `batchable`).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from p2pfl.algorithms.peer import Peer

#: (model output, targets, reference models' outputs) -> (loss, named terms): one peer's criterion, a pure
#: function of tensors (with several peers it runs under torch.func.vmap).
Criterion = Callable[[Any, torch.Tensor, list[Any]], tuple[torch.Tensor, dict[str, torch.Tensor]]]
#: (trainable parameters, those the peers started the round with), each stacked over peers ([n, *shape]) -> [n].
Penalty = Callable[[list[torch.Tensor], list[torch.Tensor]], torch.Tensor]
#: One loss per peer of a batch ([n]; a scalar for a batch of one) and named terms to report (the same shapes).
StepLoss = tuple[torch.Tensor, dict[str, torch.Tensor]]


def trainable(model: nn.Module) -> list[nn.Parameter]:
    """The model's parameters that the local step trains."""
    return [p for p in model.parameters() if p.requires_grad]


class PeerBatch:
    """One local step's batch of the peers training together (`peers`, each with its own uint8 images drawn
    from its data stream). A method's `local_loss` either builds its loss from `augment` and `model_loss`, which
    work for one peer and for several (`batchable`), or takes the single peer's `alone()` batch."""

    peers: list[Peer]

    def augment(self, draw: Callable[[Peer, torch.Tensor], Any], apply: Callable[[torch.Tensor, Any], torch.Tensor]
                ) -> torch.Tensor:
        """The model input: every peer's random draws `draw(peer, x)` from its own stream (tensors whose first
        axis is the batch), then `apply(x, draws)` once on all the images (several views come view after view)."""
        raise NotImplementedError

    def model_loss(self, inputs: torch.Tensor, criterion: Criterion, penalty: Penalty | None = None) -> StepLoss:
        """The peers' models on `inputs` (from `augment`), their reference models without gradients (the
        method's `references`), `criterion` per peer, plus `penalty` on the trainable parameters against those
        the peers started the round with."""
        raise NotImplementedError

    def alone(self) -> tuple[Peer, torch.Tensor, torch.Tensor]:
        """(peer, uint8 images, targets) of a batch of one peer: for losses written peer by peer."""
        raise NotImplementedError


class LocalRun:
    """One local round of a group of peers, step by step: what differs between a peer alone and peers stacked.
    The group is ordered so that the members still training at a step are its first n."""

    def batch(self, n: int) -> PeerBatch:
        """The next batch of the first n members."""
        raise NotImplementedError

    def step(self, loss: torch.Tensor, n: int) -> None:
        """Backward of the members' losses ([n]) and one optimiser step of each."""
        raise NotImplementedError

    def finish(self) -> list[bool]:
        """End of the round: the members' models hold their trained state; per member, whether it is finite."""
        raise NotImplementedError

    def roll_back(self, i: int) -> None:
        """Member i's model back to its state at the start of the round."""
        raise NotImplementedError
