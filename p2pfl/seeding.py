"""Random streams keyed by (seed, peer, purpose).

Every random draw a peer makes (data order, augmentations, initialisation, neighbour sampling) comes from
its own stream, so results never depend on how peers are placed on processes. Draws shared by all peers
(partitions, the public batch, participation) use ``peer=SHARED``. The numpy streams are defined in
topologies.streams (the bottom layer: topologies draw from them too and import nothing of p2pfl).
"""
from __future__ import annotations

import torch

from topologies.streams import MAX_SEED, SHARED, numpy_rng, pair_seed, stream_seed

__all__ = ["MAX_SEED", "SHARED", "numpy_rng", "pair_generator", "pair_seed", "stream_seed", "torch_generator"]


def torch_generator(seed: int, peer: int, purpose: str, device: torch.device | str = "cpu") -> torch.Generator:
    """A torch Generator on ``device`` for one (seed, peer, purpose) stream."""
    gen = torch.Generator(device=device)
    gen.manual_seed(stream_seed(seed, peer, purpose))
    return gen


def pair_generator(seed: int, i: int, j: int, purpose: str, device: torch.device | str = "cpu") -> torch.Generator:
    """A torch Generator on ``device`` for the stream peers i and j share: keyed by (seed, min(i, j), max(i, j),
    purpose), so both draw the same numbers wherever they sit (pairwise cancelling noise)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(pair_seed(seed, i, j, purpose))
    return gen
