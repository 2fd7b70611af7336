"""MOON, decentralised (SPEC §5, seed 002): model-contrastive local training, mixed by gossip.

Peer i's local loss on a batch is CE(F(x), y) + mu · ℓ_con(z, z_glob, z_prev) with
- z from the model being trained (MoonNet's projection output),
- z_glob from the model the peer started the round with: its neighbourhood mix Σ_j W_ij x_j (the global
  model of the server setting), snapshotted in `before_local`,
- z_prev from the peer's own model at the end of its previous local training, kept across rounds and only
  replaced when the peer trains (under partial participation a peer that sat rounds out keeps its last
  trained model, as the paper's w_i^{t-1} = w_i^{t-2}; so does a peer whose update was rolled back as
  non-finite, since `after_local` sees only accepted updates). `--prev-models N` keeps a FIFO pool of the last N
  such models, each adding one negative (MOON's model_buffer_size).
Both reference models run in eval mode without gradients. Before a peer's first local training there is no
previous model and ℓ_con = 0 exactly (MOON's code, round 0). `--mu` defaults to 5 (the paper's CIFAR-10
value; 1 for CIFAR-100), `--temperature` (default 0.5) is tau.

Everything else (network, augmentation, gossip, test-accuracy scoring) is FedAvg's (`p2pfl.algorithms.fedavg`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from p2pfl.algorithms.fedavg import MOON_PAPER, FedAvg
from p2pfl.algorithms.gossip_learner import GossipPeer
from p2pfl.algorithms.peer import ModelPool, Peer, derived
from p2pfl.capabilities import FEATURES, SEQUENCE_LABELS, TOKENS
from p2pfl.losses import moon_contrastive
from p2pfl.method import ASYNCHRONOUS
from p2pfl.options import method_options, opt

MOON_MU = 5.0
MOON_TAU = 0.5


@dataclass(eq=False)
class MoonPeer(GossipPeer):
    """MOON's pool of the peer's previous trained models (kept across rounds); inside a round the frozen
    snapshot of the model it started from (z_glob's source)."""

    pool: ModelPool = None
    glob: nn.Module = derived()


@method_options("moon")
class MoonOptions:
    """MOON's model-contrastive term; `mu` is FedProx's proximal weight as well (p2pfl.algorithms.fedavg)."""

    mu: float = opt(0.0, "weight of the MOON / FedProx term (moon and fedprox default to their papers' values)",
                    section="moon", paper="MOON's CIFAR-10 values: moon 5 (MOON_MU), fedprox 0.01 (FEDPROX_MU)",
                    bounds=">= 0")
    prev_models: int = opt(1, "MOON's pool of previous models", section="moon",
                           paper="MOON's model_buffer_size", bounds=">= 1")


class Moon(FedAvg):
    """Model-contrastive federated learning on a peer graph."""

    name = "moon"
    defaults = {**MOON_PAPER, "mu": MOON_MU, "temperature": MOON_TAU}
    borrows = frozenset({"temperature"})  # its contrastive term's, in dec-ssl's section
    record: ClassVar[type[Peer]] = MoonPeer
    lacks = {ASYNCHRONOUS: "its references (the model a round starts from, the pool of earlier rounds' models) "
                           "follow synchronous rounds",
             FEATURES: "its paper defines it on image classification",
             TOKENS: "its paper defines it on image classification",
             SEQUENCE_LABELS: "its paper defines it on image classification"}

    def setup(self) -> None:
        if self.cfg.head != "moon":
            raise ValueError(f"--head {self.cfg.head}: moon's contrastive term compares MOON's projections z, which "
                             "only --head moon has (the fedavg family takes --head linear)")
        super().setup()

    def init_peer(self, peer: MoonPeer) -> None:
        super().init_peer(peer)
        peer.glob = ModelPool.frozen(peer.model)
        peer.pool = ModelPool(peer.model, self.cfg.prev_models)

    # ------------------------------------------------------------------ the round
    def before_local(self, peer: MoonPeer, round: int) -> None:
        """Snapshot the model the peer starts the round with (its neighbourhood mix): the source of z_glob."""
        peer.glob.load_state_dict(peer.model.state_dict())
        peer.glob.eval()

    def after_local(self, peer: MoonPeer, round: int, steps: int) -> None:
        """Push the just-trained model (before any mixing) into the FIFO pool of previous models."""
        peer.pool.push(peer.model)

    def references(self, peer: MoonPeer) -> list[nn.Module]:
        """The round's starting model, then the pool of previous models (none before the first training)."""
        return [peer.glob, *peer.pool] if len(peer.pool) else []

    def batch_key(self, peer: MoonPeer) -> int:
        return len(peer.pool)

    def criterion(self, out: tuple[torch.Tensor, ...], y: torch.Tensor, refs: list
                  ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """CE + mu·ℓ_con on the model's (h, z, logits); plain CE while the peer has no previous model."""
        _, z, logits = out
        ce = F.cross_entropy(logits, y)
        if not refs:
            return ce, {"loss_con": torch.zeros((), device=ce.device)}
        con = moon_contrastive(z, refs[0][1], [ref[1] for ref in refs[1:]], temperature=self.cfg.temperature)
        return ce + self.cfg.mu * con, {"loss_con": con.detach()}
