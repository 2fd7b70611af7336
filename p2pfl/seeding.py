"""Random streams keyed by (seed, peer, purpose).

Every random draw a peer makes (data order, augmentations, initialisation, neighbour sampling) comes from
its own stream, so results never depend on how peers are placed on processes. Draws shared by all peers
(partitions, the public batch, participation) use ``peer=SHARED``.
"""
from __future__ import annotations

import zlib

import numpy as np
import torch

SHARED = -1
#: Seeds are 32-bit: every stream is keyed by the seed's low 32 bits, so a larger seed would repeat a smaller one.
MAX_SEED = 0xFFFFFFFF


def stream_seed(seed: int, peer: int, purpose: str) -> int:
    """A 63-bit seed that depends only on (seed, peer, purpose)."""
    entropy = [int(seed) & MAX_SEED, int(peer) + 1, zlib.crc32(purpose.encode())]
    words = np.random.SeedSequence(entropy).generate_state(2, dtype=np.uint32)
    return (int(words[0]) << 31 ^ int(words[1])) & ((1 << 63) - 1)


def numpy_rng(seed: int, peer: int, purpose: str) -> np.random.Generator:
    """A numpy Generator for one (seed, peer, purpose) stream."""
    return np.random.default_rng(stream_seed(seed, peer, purpose))


def torch_generator(seed: int, peer: int, purpose: str, device: torch.device | str = "cpu") -> torch.Generator:
    """A torch Generator on ``device`` for one (seed, peer, purpose) stream."""
    gen = torch.Generator(device=device)
    gen.manual_seed(stream_seed(seed, peer, purpose))
    return gen
