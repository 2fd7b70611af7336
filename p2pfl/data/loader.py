"""A peer's training shard on its device, and its shuffled batches."""
from __future__ import annotations

from typing import Iterator

import numpy as np
import torch

from p2pfl.seeding import torch_generator


class PeerData:
    """The training images (uint8) and targets of one peer, held on ``device``.

    Each call to :meth:`batches` is one epoch: a fresh permutation from the peer's own
    ``torch_generator(seed, peer, "data-order", device)`` stream, sliced into batches by tensor indexing.
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor, indices=None, *, peer: int, seed: int,
                 device: torch.device | str = "cpu"):
        device = torch.device(device)
        if indices is not None:
            idx = torch.as_tensor(np.asarray(indices, dtype=np.int64)) if not isinstance(indices, torch.Tensor) \
                else indices.to(torch.int64)
            x, y = x[idx.to(x.device)], y[idx.to(y.device)]
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"PeerData: {x.shape[0]} images but {y.shape[0]} targets")
        self.x = x.to(device).contiguous()
        self.y = y.to(device)
        self.peer = int(peer)
        self.seed = int(seed)
        self.device = device
        self.generator = torch_generator(seed, peer, "data-order", device)

    @classmethod
    def from_dataset(cls, dataset, indices, *, peer: int, seed: int, device: torch.device | str = "cpu"
                     ) -> "PeerData":
        """The shard ``indices`` of ``dataset.x_train`` / ``dataset.y_train``."""
        return cls(dataset.x_train, dataset.y_train, indices, peer=peer, seed=seed, device=device)

    def __len__(self) -> int:
        return int(self.x.shape[0])

    @property
    def num_samples(self) -> int:
        """How many training samples this peer holds."""
        return len(self)

    def steps_per_epoch(self, batch_size: int, drop_last: bool = True) -> int:
        """Batches in one epoch (0 when ``drop_last`` and the shard is smaller than a batch)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        n = len(self)
        return n // batch_size if drop_last else -(-n // batch_size)

    def permutation(self) -> torch.Tensor:
        """The next epoch's order of the shard (advances the data-order stream)."""
        return torch.randperm(len(self), generator=self.generator, device=self.device)

    def batches(self, batch_size: int, drop_last: bool = True) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """One epoch of (uint8 images, targets) batches in a fresh random order. The order is drawn when this
        is called (not when iteration starts), so the stream advances once per call."""
        steps = self.steps_per_epoch(batch_size, drop_last)
        order = self.permutation()

        def epoch() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
            for s in range(steps):
                idx = order[s * batch_size:(s + 1) * batch_size]
                yield self.x[idx], self.y[idx]

        return epoch()
