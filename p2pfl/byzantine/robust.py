"""A run's attackers and defence: who attacks (`choose_byzantine`), the options they and the honest peers' aggregator
run with (`Robust`), and the scratch room the robust aggregators reuse across rounds (`Scratch`)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

import torch

from p2pfl.registry import options_of
from p2pfl.seeding import SHARED, numpy_rng


@dataclass(frozen=True)
class Robust:
    """A run's attackers and defence (from --byzantine, --attack, --attack-scale, --aggregator, --trim, and the
    aggregator's and attack's own options, e.g. clipped-gossip's --clip-radius; `peers`, the network's size, is
    ALIE's n)."""

    byzantine: frozenset[int]
    attack: str = "sign-flip"
    scale: float = 1.0
    aggregator: str = "mean"
    trim: int = 1
    peers: int = 0
    #: The aggregator's and the attack's own options (their `Options` sections), by option name.
    options: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @classmethod
    def from_config(cls, cfg: Any, byzantine: frozenset[int], peers: int) -> Robust:
        """The run's attackers (`byzantine`, chosen by `choose_byzantine`) and defence among `peers` peers."""
        from p2pfl.byzantine.aggregators import AGGREGATORS
        from p2pfl.byzantine.attacks import ATTACKS
        own: dict[str, Any] = {}
        for component in (AGGREGATORS.get(cfg.aggregator), ATTACKS.get(cfg.attack)):
            section = options_of(component, cfg)
            own.update(asdict(section) if section is not None else {})
        return cls(byzantine, attack=cfg.attack, scale=cfg.attack_scale, aggregator=cfg.aggregator, trim=cfg.trim,
                   peers=peers, options=own)

    @cached_property
    def defence(self) -> Any:
        """The aggregator's class (looked up once, not per message)."""
        from p2pfl.byzantine.aggregators import AGGREGATORS
        return AGGREGATORS.get(self.aggregator)

    @cached_property
    def attacker(self) -> Any:
        """The attack's class (looked up once, not per message)."""
        from p2pfl.byzantine.attacks import ATTACKS
        return ATTACKS.get(self.attack)

    @property
    def active(self) -> bool:
        """Whether gossip needs the robust rule: attackers, or an aggregator other than the plain W-weighted mean."""
        return bool(self.byzantine) or "linear" not in self.defence.capabilities

    @property
    def omniscient(self) -> bool:
        """Whether the attack is made on the receiver's side from its inbox (p2pfl.byzantine.omniscient)."""
        return "omniscient" in self.attacker.capabilities


class Scratch:
    """Scratch vectors reused across rounds, by (slot, shape, dtype, device): a fresh 45 MB buffer costs a CPU
    more in page faults than the arithmetic done in it. Held: 2·trim + 2 model-sized vectors while robust. One
    per run (the gossip pipeline's); it holds no state, only room."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[Any, ...], torch.Tensor] = {}

    def __call__(self, slot: str, like: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        key = (slot, like.shape, dtype or like.dtype, like.device)
        if key not in self._buffers:
            self._buffers[key] = torch.empty_like(like, dtype=dtype or like.dtype)
        return self._buffers[key]


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
