"""A peer's training shard on its device, and its endless sequence of shuffled epochs."""
from __future__ import annotations

from typing import Any

import torch

from p2pfl.seeding import torch_generator


class PeerData:
    """The training images (uint8) and targets of one peer, held on ``device``, with its epoch cursor.

    A shard is either its own tensors (``x``, ``y`` as given, copied to ``device``) or, with ``rows``, a view:
    ``x`` and ``y`` are then tensors the rank holds once (its training set) and the shard is the index list of
    its rows in them, gathered per batch; nothing of the images is copied per peer (`Workload.shard`).

    Batches come from an endless sequence of epochs, each a fresh permutation from the peer's own
    ``torch_generator(seed, peer, "data-order", device)`` stream, cut into drop-last batches by tensor
    indexing. The cursor (order of the current epoch, batches used) is part of the checkpoint, so a resumed
    run continues mid-epoch exactly. A batch is the same whether the shard is a view or its own copy.
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor, *, peer: int, seed: int,
                 device: torch.device | str = "cpu", rows: torch.Tensor | None = None) -> None:
        device = torch.device(device)
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"PeerData: {x.shape[0]} images but {y.shape[0]} targets")
        #: the tensors the shard's images and targets are taken from: the shard itself, or with `rows` the rank's
        self.source_x = x.to(device).contiguous()
        self.source_y = y.to(device)
        #: the shard's rows in the sources (a view), or None when the sources are the shard
        self.rows = None if rows is None else torch.as_tensor(rows, dtype=torch.long).to(device)
        self.peer = int(peer)
        self.device = device
        self.generator = torch_generator(seed, peer, "data-order", device)
        self.order: torch.Tensor | None = None  # the current epoch's order
        self.pos = 0  # batches of it already used

    @property
    def x(self) -> torch.Tensor:
        """The shard's images (a gathered copy when the shard is a view: for whole-shard passes, not batches)."""
        return self.source_x if self.rows is None else self.source_x[self.rows]

    @property
    def y(self) -> torch.Tensor:
        """The shard's targets (gathered when the shard is a view)."""
        return self.source_y if self.rows is None else self.source_y[self.rows]

    def first(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The shard's first `n` images and targets (in shard order), without gathering the rest."""
        if self.rows is None:
            return self.source_x[:n], self.source_y[:n]
        rows = self.rows[:n]
        return self.source_x[rows], self.source_y[rows]

    def own_bytes(self) -> int:
        """The bytes this shard holds alone: its index list when a view, else its images and targets."""
        held = [self.source_x, self.source_y] if self.rows is None else [self.rows]
        return sum(t.numel() * t.element_size() for t in held)

    def shared_bytes(self) -> int:
        """The bytes of the tensors a view shares with the rank's other shards (0 for a shard of its own)."""
        return 0 if self.rows is None else sum(t.numel() * t.element_size() for t in (self.source_x, self.source_y))

    def __len__(self) -> int:
        return int(self.source_x.shape[0] if self.rows is None else self.rows.shape[0])

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
        if self.rows is not None:
            idx = self.rows[idx]
        return self.source_x[idx], self.source_y[idx]

    def state_dict(self) -> dict[str, Any]:
        """The data-order stream and the epoch cursor (not the images: they are rebuilt from the seed)."""
        return {"generator": self.generator.get_state(), "order": self.order, "pos": self.pos}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"].cpu())  # a checkpoint restored onto a GPU moved it there
        self.order = None if state["order"] is None else state["order"].to(self.device)
        self.pos = int(state["pos"])


class ShardPool:
    """Several peers' shards as rows of one tensor, so that a step's batches of all of them are one gather.

    Built once from the peers' PeerData. Views of the same tensors (`Workload.shard`) stay as they are: the pool
    is those tensors and the concatenation of the shards' index lists (`rows`). Shards of their own are copied
    into one tensor once and become views of it (no copy is kept twice). Their cursors and streams stay theirs.
    `next_batches` advances each given peer's cursor as `next_batch` would and returns exactly the images
    `next_batch` would, in peer order: a few indexing operations for all peers instead of two per peer (the host
    work that bounds many small peers on a GPU).
    """

    def __init__(self, datas: list[PeerData]) -> None:
        first = datas[0]
        if any(d.source_x.shape[1:] != first.source_x.shape[1:] or d.source_x.dtype != first.source_x.dtype
               or d.source_y.shape[1:] != first.source_y.shape[1:] or d.source_y.dtype != first.source_y.dtype
               or d.device != first.device for d in datas):
            raise ValueError("ShardPool: the shards differ in image or target shape, dtype or device")
        self.start: dict[int, int] = {}
        at = 0
        for d in datas:
            self.start[id(d)] = at
            at += len(d)
        if all(d.rows is not None and d.source_x is first.source_x and d.source_y is first.source_y for d in datas):
            self.x, self.y = first.source_x, first.source_y
            self.rows: torch.Tensor | None = torch.cat([d.rows for d in datas])  # type: ignore[misc]
            self.held = {id(d): d.rows for d in datas}
            return
        self.x = torch.cat([d.x for d in datas])
        self.y = torch.cat([d.y for d in datas])
        self.rows = None
        for d in datas:
            at, n = self.start[id(d)], len(d)
            d.source_x, d.source_y, d.rows = self.x[at:at + n], self.y[at:at + n], None
        self.held = {id(d): d.source_x for d in datas}

    def holds(self, datas: list[PeerData]) -> bool:
        """Whether every given shard is (still) what this pool was built from (its rows, or a slice of it)."""
        mine = (lambda d: d.rows) if self.rows is not None else (lambda d: d.source_x)
        return all(self.held.get(id(d)) is mine(d) and mine(d) is not None for d in datas)

    def offsets(self, datas: list[PeerData]) -> torch.Tensor:
        """Where each given shard starts in the pool ([n, 1], on the pool's device): one copy per group."""
        return torch.tensor([self.start[id(d)] for d in datas], device=self.x.device).unsqueeze(1)

    def next_batches(self, datas: list[PeerData], offsets: torch.Tensor, batch_size: int
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """The next batch of each given peer: images [n·B, ...] (peer after peer) and targets [n, B]."""
        idx = torch.stack([d.next_indices(batch_size) for d in datas]).add_(offsets[:len(datas)])
        if self.rows is not None:
            idx = self.rows[idx]
        return self.x[idx.reshape(-1)], self.y[idx]
