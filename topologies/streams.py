"""Random streams keyed by (seed, peer, purpose): the one definition, here at the bottom layer so that topologies
draw from the same streams as p2pfl (p2pfl.seeding re-exports these and adds torch generators).

Draws shared by all peers (a random graph, a round's matching) use ``peer=SHARED``.
"""
from __future__ import annotations

import zlib

import numpy as np

SHARED = -1
#: Seeds are 32-bit: every stream is keyed by the seed's low 32 bits, so a larger seed would repeat a smaller one.
MAX_SEED = 0xFFFFFFFF


def stream_seed(seed: int, peer: int, purpose: str) -> int:
    """A 63-bit seed that depends only on (seed, peer, purpose)."""
    entropy = [int(seed) & MAX_SEED, int(peer) + 1, zlib.crc32(purpose.encode())]
    words = np.random.SeedSequence(entropy).generate_state(2, dtype=np.uint32)
    return (int(words[0]) << 31 ^ int(words[1])) & ((1 << 63) - 1)


def pair_seed(seed: int, i: int, j: int, purpose: str) -> int:
    """A 63-bit seed that depends only on (seed, {i, j}, purpose): the stream two peers share (pairwise cancelling
    noise), the same whichever of them asks. Its key has four words, so it never equals a peer's own stream."""
    lo, hi = sorted((int(i), int(j)))
    entropy = [int(seed) & MAX_SEED, lo + 1, hi + 1, zlib.crc32(purpose.encode())]
    words = np.random.SeedSequence(entropy).generate_state(2, dtype=np.uint32)
    return (int(words[0]) << 31 ^ int(words[1])) & ((1 << 63) - 1)


def numpy_rng(seed: int, peer: int, purpose: str) -> np.random.Generator:
    """A numpy Generator for one (seed, peer, purpose) stream."""
    return np.random.default_rng(stream_seed(seed, peer, purpose))
