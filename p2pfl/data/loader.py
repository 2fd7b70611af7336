"""A peer's training shard on its device, and its endless sequence of shuffled epochs."""
from __future__ import annotations

from typing import Any

import torch

from p2pfl.seeding import torch_generator


class PeerData:
    """The training images (uint8) and targets of one peer, held on ``device``, with its epoch cursor.

    Batches come from an endless sequence of epochs, each a fresh permutation from the peer's own
    ``torch_generator(seed, peer, "data-order", device)`` stream, cut into drop-last batches by tensor
    indexing. The cursor (order of the current epoch, batches used) is part of the checkpoint, so a resumed
    run continues mid-epoch exactly.
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor, *, peer: int, seed: int,
                 device: torch.device | str = "cpu") -> None:
        device = torch.device(device)
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"PeerData: {x.shape[0]} images but {y.shape[0]} targets")
        self.x = x.to(device).contiguous()
        self.y = y.to(device)
        self.peer = int(peer)
        self.device = device
        self.generator = torch_generator(seed, peer, "data-order", device)
        self.order: torch.Tensor | None = None  # the current epoch's order
        self.pos = 0  # batches of it already used

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def steps_per_epoch(self, batch_size: int) -> int:
        """Drop-last batches in one epoch (0 when the shard is smaller than a batch)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        return len(self) // batch_size

    def permutation(self) -> torch.Tensor:
        """The next epoch's order of the shard (advances the data-order stream)."""
        return torch.randperm(len(self), generator=self.generator, device=self.device)

    def next_batch(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The next (uint8 images, targets) batch; a new epoch starts when the current one is used up."""
        if self.order is None or self.pos >= self.steps_per_epoch(batch_size):
            self.order, self.pos = self.permutation(), 0
        idx = self.order[self.pos * batch_size:(self.pos + 1) * batch_size]
        self.pos += 1
        return self.x[idx], self.y[idx]

    def state_dict(self) -> dict[str, Any]:
        """The data-order stream and the epoch cursor (not the images: they are rebuilt from the seed)."""
        return {"generator": self.generator.get_state(), "order": self.order, "pos": self.pos}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"].cpu())  # a checkpoint restored onto a GPU moved it there
        self.order = None if state["order"] is None else state["order"].to(self.device)
        self.pos = int(state["pos"])
