"""What one peer holds: a record per peer, declared by each method as a dataclass.

`Peer` is what every training method keeps of a peer (model, data with its epoch cursor, RNG stream,
optimiser); a method subclasses it with its own fields (MOON's pool of previous models, SCAFFOLD's control
variates, FedMuscle's representation optimiser...). Checkpoints save and restore every field generically
(`p2pfl.runtime.checkpoint.record_state`), so a new method gets exact resume by declaring its record; fields
rebuilt from the configuration or only used inside a round are marked `derived()` and not saved.
"""
from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from p2pfl.data import PeerData
from p2pfl.runtime.checkpoint import CHECKPOINT, WHEN_SET


def derived(default: Any = None) -> Any:
    """A field that is rebuilt at set-up or lives inside one round: not part of the checkpoint."""
    return field(default=default, metadata={CHECKPOINT: False})


class OnDemand:
    """A record field holding an optimiser, or a factory of one that is called when the field is first read.

    Peers trained peer-stacked step with `p2pfl.stacked_optim` and read their own `torch.optim` optimiser only to
    carry its state (--keep-optimizer), to checkpoint it or when they train alone; building one per peer at set-up
    anyway cost most of the set-up (the first one imports torch._dynamo). A field declared `= OnDemand()` has no
    default: it is given at construction, as the optimiser or as a zero-argument callable returning it.
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = f"_{name}_on_demand"

    def __get__(self, record: Any, owner: type | None = None) -> torch.optim.Optimizer:
        if record is None:  # class access: no default value (dataclasses asks so)
            raise AttributeError(self.slot)
        value = record.__dict__[self.slot]
        if not isinstance(value, torch.optim.Optimizer):
            value = record.__dict__[self.slot] = value()
        return value

    def __set__(self, record: Any, value: torch.optim.Optimizer | Callable[[], torch.optim.Optimizer]) -> None:
        record.__dict__[self.slot] = value

    def built(self, record: Any) -> bool:
        """Whether `record`'s optimiser exists (has been read or was given built)."""
        return isinstance(record.__dict__.get(self.slot), torch.optim.Optimizer)


@dataclass(eq=False)
class Peer:
    """One training peer: its model, its shard (and epoch cursor), its augmentation stream, its optimiser (built
    when first read: `OnDemand`)."""

    id: int = field(metadata={CHECKPOINT: False})
    model: nn.Module
    data: PeerData
    augment_rng: torch.Generator
    optimizer: torch.optim.Optimizer = OnDemand()  # type: ignore[assignment]
    #: What the peer remembers as an attacker (--byzantine) across rounds, per stream of vectors it sends: stale
    #: its first message (p2pfl.gossip.codec.Attacking); empty for honest peers and the other attacks.
    attack_memory: dict[str, Any] = field(default_factory=dict, kw_only=True)
    #: The DP-SGD steps the peer has taken (--dp-clip): what its privacy accountant composes, and the key of its
    #: next noise draw; checkpointed once set, so a DP run resumes with its account and noise exactly.
    dp_steps: int = field(default=0, kw_only=True, metadata={WHEN_SET: True})


@dataclass(eq=False)
class ConsensusPeer:
    """A peer of the consensus check: one vector (push-sum's z = x/w) and its --gossip scheme's state (w)."""

    id: int = field(metadata={CHECKPOINT: False})
    x: torch.Tensor
    scheme: dict[str, torch.Tensor] = field(default_factory=dict)
    attack_memory: dict[str, Any] = field(default_factory=dict, kw_only=True)  # as Peer's


class ModelPool:
    """A FIFO pool of frozen copies of a model (eval mode, no gradients), oldest first; checkpointable through
    state_dict / load_state_dict like a module."""

    def __init__(self, template: nn.Module, capacity: int) -> None:
        self.template = template
        self.capacity = capacity
        self.models: list[nn.Module] = []

    @staticmethod
    def frozen(model: nn.Module) -> nn.Module:
        """A copy of `model` for reference use: eval mode, no gradients."""
        ref = copy.deepcopy(model)
        ref.requires_grad_(False)
        return ref.eval()

    def push(self, model: nn.Module) -> None:
        """Append a frozen copy of `model`'s current state, dropping the oldest beyond the capacity."""
        ref = self.models.pop(0) if len(self.models) >= self.capacity else self.frozen(model)
        ref.load_state_dict(model.state_dict())
        ref.eval()
        self.models.append(ref)
        while len(self.models) > self.capacity:
            self.models.pop(0)

    def __len__(self) -> int:
        return len(self.models)

    def __iter__(self):
        return iter(self.models)

    def __getitem__(self, index: int) -> nn.Module:
        return self.models[index]

    def state_dict(self) -> list[dict[str, torch.Tensor]]:
        return [ref.state_dict() for ref in self.models]

    def load_state_dict(self, states: list[dict[str, torch.Tensor]]) -> None:
        self.models = []
        for sd in states[-self.capacity:]:
            ref = self.frozen(self.template)
            ref.load_state_dict(sd)
            self.models.append(ref.eval())
