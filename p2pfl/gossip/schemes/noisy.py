"""What the noise-then-gossip schemes (Muffliato, Decor) share: a round adds each peer's noise to the vector it
mixes (x − ηg), once, then runs the plain W-weighted mix --gossip-steps times; and a ledger, kept on rank 0 from the
schedule's networks, updated after every round (replaying the rounds before a --resume), whose running totals go in
the round records and whose arrays go in the run folder (`Scheme.arrays`, written by the runner). The mechanisms'
noise and ledgers are p2pfl.privacy's."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from p2pfl.gossip.mix import Gossip, Mixed
from p2pfl.gossip.rules import Rule
from p2pfl.gossip.schemes.base import MULTI_STEP, NO_REJOIN_MIX, UPDATED_ONLY, MultiStep, State
from p2pfl.network.schedule import RoundNetwork


class NoisyGossip(MultiStep):
    """A scheme that adds noise before the plain mix and accounts for it (subclasses: `noisy`, `account`,
    `metrics`). It is not plain-mix (a method must call its round, which adds the noise), takes no rejoining pull (an
    exchange its ledger would not see) and no compression."""

    needs: ClassVar[frozenset[str]] = frozenset()
    capabilities: ClassVar[frozenset[str]] = frozenset({MULTI_STEP, UPDATED_ONLY, NO_REJOIN_MIX})

    schedule: Any = None
    accounted = 0  # the last round the ledger holds
    keeps_ledger = False  # rank 0 only, set by `prepare`

    def prepare(self, ctx: Any) -> None:
        self.schedule = ctx.schedule
        self.keeps_ledger = bool(ctx.world.is_root)

    def noisy(self, vectors: dict[int, torch.Tensor], state: dict[int, State], net: RoundNetwork,
              round: int) -> dict[int, torch.Tensor]:
        """The vectors the local active peers mix in `round`, their noise added."""
        raise NotImplementedError

    def account(self, round: int, net: RoundNetwork) -> None:
        """Add round `round`, whose network is `net`, to the ledger (rank 0)."""
        raise NotImplementedError

    def metrics(self) -> dict[str, Any]:
        """The ledger's running totals for a round record."""
        raise NotImplementedError

    def round(self, gossip: Gossip, x: dict[int, torch.Tensor], g: dict[int, torch.Tensor], lr: float,
              state: dict[int, State], net: RoundNetwork, round: int, sizes: Sequence[float] | None = None) -> Mixed:
        """One pure gossip step of x − ηg (the noise is `rounds`')."""
        return gossip.combine({p: x[p] - lr * g[p] for p in x}, net, round, Rule(sizes))

    def rounds(self, gossip: Gossip, x: dict[int, torch.Tensor], g: dict[int, torch.Tensor], lr: float,
               state: dict[int, State], net: RoundNetwork, round: int, sizes: Sequence[float] | None = None,
               steps: int = 1) -> Mixed:
        noisy = self.noisy({p: x[p] - lr * g[p] for p in x}, state, net, round)
        return super().rounds(gossip, noisy, {p: torch.zeros_like(v) for p, v in noisy.items()}, lr, state, net,
                              round, sizes, steps)

    def round_metrics(self, round: int, net: RoundNetwork) -> dict[str, Any] | None:
        if round == 0 or not self.keeps_ledger:
            return None
        for earlier in range(self.accounted + 1, round):  # after --resume: the rounds before it, replayed
            self.account(earlier, self.schedule.at(earlier))
        self.account(round, net)
        self.accounted = round
        return self.metrics()
