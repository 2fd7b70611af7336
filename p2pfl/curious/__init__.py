"""Curious neighbours: honest-but-curious peers that follow the protocol and only look at what they receive. One
attack a file, registered in `CURIOUS` and chosen by --curious-attack; --curious places the curious peers
(p2pfl.curious.placement). An attack observes every message a curious peer receives (the checked exchange hands
each delivered inbox to `observe`, p2pfl.gossip.checked) and scores what it learnt at every evaluation
(`evaluate`, collective): its numbers join the evaluation's metrics and the summary's `final`. It never changes
the run: without --curious nothing of it exists, and with it the run's other records stay bit for bit."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import torch

from p2pfl.curious.placement import PLACEMENTS, curious_count, parse_curious
from p2pfl.options import Check, method_options, opt, owned
from p2pfl.registry import Component, Registry

if TYPE_CHECKING:
    from p2pfl.context import RunContext
    from p2pfl.method import Algorithm
    from p2pfl.network import RoundNetwork

#: The attacks of curious neighbours, by their --curious-attack name.
CURIOUS: Registry[Any] = Registry("privacy attack", option="curious_attack", package="p2pfl.curious")

#: A delivered exchange of this rank: receiver -> sender -> the decoded message.
Inbox = dict[int, dict[int, torch.Tensor]]


class CuriousAttack(Component):
    """An attack of the curious peers `curious` (every rank knows them; each observes its own receivers)."""

    @method_options("curious")
    class Options:
        """Where the curious peers sit and what they attack (docs/privacy.md)."""

        curious: str | None = opt(None, "honest-but-curious peers that attack what they receive: a list (3,7) or "
                                        "a fraction of the peers (0.2, 20%) placed by --curious-placement",
                                  section="curious")
        curious_placement: str = opt("degree", "where a fraction of curious peers sits: the highest degree, the "
                                               "highest betweenness centrality, or drawn at random (shared stream)",
                                     PLACEMENTS, section="curious")
        curious_attack: str = opt("reconstruction", "what the curious peers attack (--help privacy-attack)",
                                  owned("p2pfl.curious", "CURIOUS"), section="curious")

    def __init__(self, ctx: RunContext, algorithm: Algorithm, curious: frozenset[int], options: Any) -> None:
        self.ctx, self.algorithm, self.curious, self.options = ctx, algorithm, curious, options

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        """--curious parses; the attack keeps no checkpoint (no --resume) and follows the rounds of the sync
        runner (the schedule's networks)."""
        if cfg.curious is None:
            return
        try:
            parse_curious(cfg.curious)
        except ValueError as exc:
            check(False, "curious", str(exc).removeprefix("--curious: "))
        check(cfg.resume is None, "curious", "the attacks keep no checkpoint: not with --resume")
        from p2pfl.modes import MODES
        check(MODES.get(cfg.mode).runs_with == "p2pfl.runner:Runner", "curious",
              f"the attacks follow the rounds of the schedule: not with --mode {cfg.mode}")

    @classmethod
    def check_resolved(cls, cfg: Any, check: Check) -> None:
        """The listed curious peers exist and leave a peer to attack."""
        if cfg.curious is None:
            return
        parsed = parse_curious(cfg.curious)
        count = curious_count(parsed, cfg.peers) if isinstance(parsed, float) else len(parsed)
        if isinstance(parsed, tuple):
            check(parsed[-1] < cfg.peers, "curious", f"peer {parsed[-1]} does not exist (peers are 0..{cfg.peers - 1})")
        check(count < cfg.peers, "curious", f"{count} curious peers leave no peer to attack among {cfg.peers}")

    def observe(self, round: int, inbox: Inbox) -> None:
        """What this rank's receivers got in one exchange of `round` (before anything is combined); an attack
        keeps what its curious receivers saw. Must not change a tensor."""

    def evaluate(self, round: int, final: bool, net: RoundNetwork
                 ) -> tuple[dict[str, float], dict[int, dict[str, float]]]:
        """What the attack achieved after `round`: its metrics and its per-peer numbers (by victim), joined to the
        evaluation's (collective: every rank calls it; rank 0's count, the other ranks' are ignored)."""
        raise NotImplementedError

    #: How the metrics an attack records are named: each starts with this (docs/privacy.md).
    prefix: ClassVar[str] = "curious_"
