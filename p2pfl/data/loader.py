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

    def next_indices(self, batch_size: int) -> torch.Tensor:
        """The shard indices of the next batch (a view of the epoch's order); a new epoch starts when the
        current one is used up."""
        if self.order is None or self.pos >= self.steps_per_epoch(batch_size):
            self.order, self.pos = self.permutation(), 0
        idx = self.order[self.pos * batch_size:(self.pos + 1) * batch_size]
        self.pos += 1
        return idx

    def next_batch(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The next (uint8 images, targets) batch."""
        idx = self.next_indices(batch_size)
        return self.x[idx], self.y[idx]

    def state_dict(self) -> dict[str, Any]:
        """The data-order stream and the epoch cursor (not the images: they are rebuilt from the seed)."""
        return {"generator": self.generator.get_state(), "order": self.order, "pos": self.pos}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"].cpu())  # a checkpoint restored onto a GPU moved it there
        self.order = None if state["order"] is None else state["order"].to(self.device)
        self.pos = int(state["pos"])


class ShardPool:
    """Several peers' shards as slices of one tensor, so that a step's batches of all of them are one gather.

    Built once from the peers' PeerData, whose images and targets become views into the pool (no copy is
    kept twice); their cursors and streams stay theirs. `next_batches` advances each given peer's cursor as
    `next_batch` would and returns exactly the images `next_batch` would, in peer order: two indexing
    operations for all peers instead of two per peer (the host work that bounds many small peers on a GPU).
    """

    def __init__(self, datas: list[PeerData]) -> None:
        first = datas[0]
        if any(d.x.shape[1:] != first.x.shape[1:] or d.x.dtype != first.x.dtype or d.y.shape[1:] != first.y.shape[1:]
               or d.y.dtype != first.y.dtype or d.device != first.device for d in datas):
            raise ValueError("ShardPool: the shards differ in image or target shape, dtype or device")
        self.x = torch.cat([d.x for d in datas])
        self.y = torch.cat([d.y for d in datas])
        self.start: dict[int, int] = {}
        at = 0
        for d in datas:
            n = len(d)
            d.x, d.y = self.x[at:at + n], self.y[at:at + n]
            self.start[id(d)] = at
            at += n

    def holds(self, datas: list[PeerData]) -> bool:
        """Whether every given shard is (still) a slice of this pool."""
        return all(id(d) in self.start and d.x.data_ptr() == self.x[self.start[id(d)]:].data_ptr() for d in datas)

    def offsets(self, datas: list[PeerData]) -> torch.Tensor:
        """Where each given shard starts in the pool ([n, 1], on the pool's device): one copy per group."""
        return torch.tensor([self.start[id(d)] for d in datas], device=self.x.device).unsqueeze(1)

    def next_batches(self, datas: list[PeerData], offsets: torch.Tensor, batch_size: int
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """The next batch of each given peer: images [n·B, ...] (peer after peer) and targets [n, B]."""
        idx = torch.stack([d.next_indices(batch_size) for d in datas]).add_(offsets[:len(datas)])
        return self.x[idx.reshape(-1)], self.y[idx]
