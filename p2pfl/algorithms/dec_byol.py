"""Dec-SSL with BYOL (SPEC §4; standard BYOL, not in the Dec-SSL code): an online network mixed by gossip and
a momentum target network that stays with its peer.

- The online network (encoder + projector + predictor, `p2pfl.models.siamese.BYOLNet`) is the peer's model:
  trained on the SimCLR views with BYOL's symmetrised loss (`p2pfl.losses.siamese.byol_loss`) against the
  target's projections, and mixed by gossip like any Dec-SSL model.
- The target network (encoder + projector) is a field of the peer's record (`BYOLPeer.target`), outside the
  model, so it is never mixed; checkpoints keep it and the peer's step count, so a resumed run is exact. It is
  built once at set-up equal to the common initialisation of the online encoder + projector, and is not reset
  when gossip (or --rejoin mix) changes the online network: it keeps following its own peer's online network.
- After every local optimiser step of the peer the target follows the online network by EMA,
  xi <- tau_k xi + (1 - tau_k) theta (parameters; the target's BatchNorm runs on batch statistics), with
  BYOL's cosine schedule tau_k = 1 - (1 - tau_base) (cos(pi k / K) + 1) / 2: k is the number of local steps
  the peer took before this one (0 for its first), K the local steps of the whole run (--rounds times the
  full steps of a round), tau_base --byol-tau (0.99). A peer that sits rounds out or straggles takes fewer
  than K steps, so its tau ends below 1. An update rolled back as non-finite also rolls back the target.
- The optimiser is Adam 1e-3 like Dec-SSL's (project defaults); BYOL's LARS setting is not reproduced.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from p2pfl.algorithms.dec_ssl import DEC_SSL_BUDGET, DecSSL
from p2pfl.algorithms.gossip_learner import GossipPeer
from p2pfl.algorithms.peer import Peer
from p2pfl.losses.siamese import byol_loss, output_std
from p2pfl.method import ASYNCHRONOUS, BATCHABLE, LocalRound
from p2pfl.models import build_encoder
from p2pfl.models.params import state_copy
from p2pfl.models.siamese import BYOLNet, follow_
from p2pfl.network import RoundNetwork
from p2pfl.options import method_options, opt


@dataclass(eq=False)
class BYOLPeer(GossipPeer):
    """The peer's own target network (never mixed) and the number of local steps it has taken."""

    target: nn.Module = None
    steps_done: int = 0


def byol_tau(base: float, k: int, total: int) -> float:
    """BYOL's target momentum at step k of `total`: 1 - (1 - base) (cos(pi k / total) + 1) / 2 (k capped)."""
    k = min(max(int(k), 0), max(int(total), 1))
    return 1.0 - (1.0 - base) * (math.cos(math.pi * k / max(int(total), 1)) + 1.0) / 2.0


@method_options("dec-byol")
class DecBYOLOptions:
    """BYOL's target network."""

    byol_tau: float = opt(0.99, "BYOL's base target momentum; it rises to 1 along a cosine over the run's local "
                          "steps", section="ssl", paper="BYOL's tau_base", bounds="(0, 1)")


class DecBYOL(DecSSL):
    """BYOL peers on a gossip graph: online networks mixed, momentum targets local."""

    name = "dec-byol"
    defaults = DEC_SSL_BUDGET
    ignores = {"temperature": "BYOL's loss is a mean squared error of normalised predictions, without a "
                              "temperature"}
    lacks = {ASYNCHRONOUS: "its target momentum follows the rounds, which async does not count",
             BATCHABLE: "the target's per-step EMA is per-peer state the peer-stacked path does not carry"}
    record: ClassVar[type[Peer]] = BYOLPeer
    peers: dict[int, BYOLPeer]

    def make_model(self) -> nn.Module:
        encoder = build_encoder(self.cfg.model, self.work.channels, self.work.image_size, cfg=self.cfg)
        return BYOLNet(encoder, proj_dim=self.cfg.proj_dim)

    def init_peer(self, peer: BYOLPeer) -> None:
        super().init_peer(peer)
        peer.target = peer.model.target()
        peer.steps_done = 0
        peer.optimizer.register_step_post_hook(lambda opt, args, kwargs, peer=peer: self.follow(peer))

    # ------------------------------------------------------------------ the target
    def run_steps(self, peer: BYOLPeer) -> int:
        """K: the peer's local steps over the whole run at full participation."""
        return self.full_steps(peer) * self.cfg.rounds

    def tau(self, peer: BYOLPeer) -> float:
        """The momentum of the peer's next target update."""
        return byol_tau(self.cfg.byol_tau, peer.steps_done, self.run_steps(peer))

    def follow(self, peer: BYOLPeer) -> None:
        """After an optimiser step: the target takes one EMA step towards the peer's online network."""
        follow_(peer.target, peer.model, self.tau(peer))
        peer.steps_done += 1

    def references(self, peer: BYOLPeer) -> list[nn.Module]:
        return [peer.target]

    def train_group(self, group: list[BYOLPeer], round: int, net: RoundNetwork, out: LocalRound) -> None:
        """The local round; a peer's rolled back as non-finite rolls back its target and step count too."""
        kept = {peer.id: (state_copy(peer.target), peer.steps_done) for peer in group}
        rolled = len(out.rolled_back)
        super().train_group(group, round, net, out)
        for p in out.rolled_back[rolled:]:
            self.peers[p].target.load_state_dict(kept[p][0])
            self.peers[p].steps_done = kept[p][1]

    # ------------------------------------------------------------------ the loss
    def criterion(self, out: tuple[torch.Tensor, torch.Tensor], y: torch.Tensor, refs: list
                  ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """BYOL's loss of the online predictions against the target projections of the other view."""
        z, p = out
        t1, t2 = refs[0].chunk(2)
        p1, p2 = p.chunk(2)
        return byol_loss(p1, p2, t1, t2), {"z_std": output_std(z)}
