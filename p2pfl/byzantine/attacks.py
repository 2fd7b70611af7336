"""What a Byzantine peer sends instead of its vector. These attackers send one vector to all their neighbours,
made on their own side (p2pfl.gossip.codec.Attacking):

- sign-flip: −scale · x (the peer's own vector, negated);
- gaussian: x + scale · ε, ε ~ N(0, I) from the attacker's own stream (seed, peer, 'attack/t');
- zero: the zero vector;
- stale: the first vector it ever sent, forever.

The omniscient attacks, alie and dissensus, are tailored to each receiver from what it gets this round; they are
made on the receiver's side (p2pfl.byzantine.omniscient).
"""
from __future__ import annotations

import torch

from p2pfl.byzantine.omniscient import OMNISCIENT
from p2pfl.seeding import SHARED, numpy_rng, torch_generator

ATTACKS = ("sign-flip", "gaussian", "alie", "zero", "stale", "dissensus")


def choose_byzantine(spec: str | None, n_peers: int, seed: int) -> frozenset[int]:
    """The attackers: a list of peers ('3,7') or a count ('2') drawn from the stream (seed, SHARED, 'byzantine').
    ValueError naming --byzantine when a peer does not exist or the count leaves no honest peer."""
    if spec is None or not spec.strip():
        return frozenset()
    parts = [p.strip() for p in spec.split(",")]
    if not all(p.isdigit() for p in parts):
        raise ValueError(f"--byzantine: expected a count or a list of peers (2 or 3,7), got {spec!r}")
    if len(parts) == 1 and "," not in spec:
        count = int(parts[0])
        if count >= n_peers:
            raise ValueError(f"--byzantine: {count} attackers leave no honest peer among {n_peers}")
        return frozenset(int(p) for p in numpy_rng(seed, SHARED, "byzantine").choice(n_peers, count, replace=False))
    peers = {int(p) for p in parts}
    missing = sorted(p for p in peers if p >= n_peers)
    if missing:
        raise ValueError(f"--byzantine: peer {missing[0]} does not exist (peers are 0..{n_peers - 1})")
    if len(peers) >= n_peers:
        raise ValueError(f"--byzantine: {len(peers)} attackers leave no honest peer among {n_peers}")
    return frozenset(peers)


def attack_vector(kind: str, x: torch.Tensor, *, seed: int, peer: int, round: int, scale: float,
                  first: torch.Tensor | None = None) -> torch.Tensor:
    """The vector attacker `peer` sends in `round` instead of its own `x` (`first`: stale's first message)."""
    if kind == "sign-flip":
        return -scale * x
    if kind == "gaussian":
        gen = torch_generator(seed, peer, f"attack/{round}", x.device)
        return x + scale * torch.randn(x.shape, generator=gen, device=x.device, dtype=x.dtype)
    if kind == "zero":
        return torch.zeros_like(x)
    if kind == "stale":
        return first if first is not None else x
    if kind in OMNISCIENT:
        raise ValueError(f"--attack {kind} is made on the receiver's side (p2pfl.byzantine.omniscient)")
    raise ValueError(f"--attack: unknown attack {kind!r}; known: {', '.join(ATTACKS)}")
