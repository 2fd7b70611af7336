"""MOON, decentralised (SPEC §5, seed 002): model-contrastive local training, mixed by gossip.

Peer i's local loss on a batch is CE(F(x), y) + mu · ℓ_con(z, z_glob, z_prev) with
- z from the model being trained (MoonNet's projection output),
- z_glob from the model the peer started the round with: its neighbourhood mix Σ_j W_ij x_j (the global
  model of the server setting), snapshotted in `before_local`,
- z_prev from the peer's own model at the end of its previous local training, kept across rounds and only
  replaced when the peer trains (under partial participation a peer that sat rounds out keeps its last
  trained model, as the paper's w_i^{t-1} = w_i^{t-2}). `--prev-models N` keeps a FIFO pool of the last N
  such models, each adding one negative (MOON's model_buffer_size).
Both reference models run in eval mode without gradients. Before a peer's first local training there is no
previous model and ℓ_con = 0 exactly (MOON's code, round 0). `--mu` defaults to 5 (the paper's CIFAR-10
value; 1 for CIFAR-100), `--temperature` (default 0.5) is tau.

Everything else (network, augmentation, gossip, test-accuracy scoring) is FedAvg's (`p2pfl.algorithms.fedavg`).
"""
from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from p2pfl.algorithms.fedavg import MOON_PAPER, FedAvg
from p2pfl.losses import moon_contrastive

MOON_MU = 5.0
MOON_TAU = 0.5


def _frozen(model: nn.Module) -> nn.Module:
    """A copy of `model` for reference use: eval mode, no gradients."""
    ref = copy.deepcopy(model)
    ref.requires_grad_(False)
    return ref.eval()


class Moon(FedAvg):
    """Model-contrastive federated learning on a peer graph."""

    name = "moon"
    defaults = {**MOON_PAPER, "mu": MOON_MU, "temperature": MOON_TAU}

    def setup(self) -> None:
        super().setup()
        self.glob: dict[int, nn.Module] = {p: _frozen(self.models[p]) for p in self.ctx.local_peers}
        self.pool: dict[int, list[nn.Module]] = {p: [] for p in self.ctx.local_peers}
        self._con: dict[int, torch.Tensor] = {}

    # ------------------------------------------------------------------ the round
    def before_local(self, peer: int, round: int) -> None:
        """Snapshot the model the peer starts the round with (its neighbourhood mix): the source of z_glob."""
        self.glob[peer].load_state_dict(self.models[peer].state_dict())
        self.glob[peer].eval()
        self._con[peer] = torch.zeros((), device=self.ctx.device)

    def after_local(self, peer: int, round: int) -> None:
        """Push the just-trained model (before any mixing) into the FIFO pool of previous models."""
        pool = self.pool[peer]
        ref = pool.pop(0) if len(pool) >= self.cfg.prev_models else _frozen(self.models[peer])
        ref.load_state_dict(self.models[peer].state_dict())
        ref.eval()
        pool.append(ref)
        while len(pool) > self.cfg.prev_models:
            pool.pop(0)

    def local_update(self, peer: int, round: int) -> dict[str, float]:
        out = super().local_update(peer, round)
        steps = self.steps(peer)
        out["loss_con"] = float(self._con.pop(peer)) / steps
        return out

    def loss(self, peer: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """CE + mu·ℓ_con on an augmented, normalised batch; plain CE while the peer has no previous model."""
        _, z, logits = self.models[peer](x)
        ce = F.cross_entropy(logits, y)
        con = self.contrastive(peer, x, z)
        if con is None:
            return ce
        if peer in self._con:
            self._con[peer] += con.detach()
        return ce + self.cfg.mu * con

    def contrastive(self, peer: int, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor | None:
        """ℓ_con of the batch for representation z (None before the peer's first local training)."""
        pool = self.pool[peer]
        if not pool:
            return None
        with torch.no_grad():
            z_glob = self.glob[peer](x)[1]
            z_prev = [ref(x)[1] for ref in pool]
        return moon_contrastive(z, z_glob, z_prev, temperature=self.cfg.temperature)

    # ------------------------------------------------------------------ checkpoints
    def peer_state(self, peer: int) -> dict[str, Any]:
        """Learner's state plus the pool of previous models, oldest first."""
        return {**super().peer_state(peer), "prev_models": [ref.state_dict() for ref in self.pool[peer]]}

    def load_peer_state(self, peer: int, state: dict[str, Any]) -> None:
        super().load_peer_state(peer, state)
        pool = []
        for sd in state.get("prev_models", [])[-self.cfg.prev_models:]:
            ref = _frozen(self.models[peer])
            ref.load_state_dict(sd)
            pool.append(ref.eval())
        self.pool[peer] = pool
