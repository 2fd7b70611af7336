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
    #: The attack's `Options` as the run holds them (None: its defaults, or it declares none).
    attack_options: Any = field(default=None, hash=False, compare=False)

    @classmethod
    def from_config(cls, cfg: Any, byzantine: frozenset[int], peers: int) -> Robust:
        """The run's attackers (`byzantine`, chosen by `choose_byzantine`) and defence among `peers` peers."""
        from p2pfl.byzantine.aggregators import AGGREGATORS
        from p2pfl.byzantine.attacks import ATTACKS
        defence, attack = options_of(AGGREGATORS.get(cfg.aggregator), cfg), options_of(ATTACKS.get(cfg.attack), cfg)
        own = {**(asdict(defence) if defence is not None else {}), **(asdict(attack) if attack is not None else {})}
        return cls(byzantine, attack=cfg.attack, scale=cfg.attack_scale, aggregator=cfg.aggregator, trim=cfg.trim,
                   peers=peers, options=own, attack_options=attack)

    @cached_property
    def defence(self) -> Any:
        """The aggregator's class (looked up once, not per message)."""
        from p2pfl.byzantine.aggregators import AGGREGATORS
        return AGGREGATORS.get(self.aggregator)

    @cached_property
    def attack_class(self) -> Any:
        """The attack's class (looked up once, not per message)."""
        from p2pfl.byzantine.attacks import ATTACKS
        return ATTACKS.get(self.attack)

    @cached_property
    def own_attack_options(self) -> Any:
        """The attack's own `Options`: the run's, else their defaults (None when it declares none)."""
        return self.attack_options if self.attack_options is not None else options_of(self.attack_class, None)

    @cached_property
    def attacker(self) -> Any:
        """The attack made on the attacker's side, with its own options (made once, not per message)."""
        return self.attack_class(self.own_attack_options)

    def adversary(self) -> Any:
        """The receiver's side of an omniscient attack (p2pfl.byzantine.omniscient), with its own options."""
        from p2pfl.byzantine.omniscient import Adversary
        return Adversary(self.attack, self.byzantine, self.peers, self.scale, self.own_attack_options)

    @property
    def active(self) -> bool:
        """Whether gossip needs the robust rule: attackers, or an aggregator other than the plain W-weighted mean."""
        return bool(self.byzantine) or "linear" not in self.defence.capabilities

    @property
    def omniscient(self) -> bool:
        """Whether the attack is made on the receiver's side from its inbox (p2pfl.byzantine.omniscient)."""
        return "omniscient" in self.attack_class.capabilities


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
