"""The local trainer: what every training method does on its own shard between two communications.

A method on top of it declares its peer record (`record`), builds each peer's model and shard, and supplies its
loss on a batch (`batch_loss`) and, where it needs them, hooks around a peer's local round (`before_local`,
`after_backward`, `after_local`, `init_peer`). The trainer holds the rest once: the per-peer records,
optimisers and their per-round reset, learning-rate schedules, the batch size and number of steps, and the
local loop. Checkpoints of the records are generic (`p2pfl.runtime.checkpoint`).
"""
from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import nn

from p2pfl import optim
from p2pfl.algorithms.peer import Peer
from p2pfl.data import PeerData
from p2pfl.rounds import Algorithm, RunContext
from p2pfl.seeding import torch_generator


class LocalTrainer(Algorithm):
    """Peers that train their own model on their own shard (the local phase of SPEC §2)."""

    #: The dataclass of what one peer holds; methods with state of their own subclass `Peer`.
    record: ClassVar[type[Peer]] = Peer
    #: False for the baselines that never talk to their neighbours.
    communicates: ClassVar[bool] = True

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.peers: dict[int, Peer] = {}

    # ------------------------------------------------------------------ what a method supplies
    def load_data(self) -> None:
        """Load what the peers' shards are cut from (called once, before any peer is built)."""
        raise NotImplementedError

    def shard(self, peer: int) -> PeerData:
        """The peer's training data on the run's device."""
        raise NotImplementedError

    def build_model(self, peer: int) -> nn.Module:
        """The peer's model, initialised, on the run's device."""
        raise NotImplementedError

    def batch_loss(self, peer: Peer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The loss of one batch of uint8 images `x` with targets `y` (augmentation is the method's)."""
        raise NotImplementedError

    def init_peer(self, peer: Peer) -> None:
        """Fill the method's own fields of a freshly built record."""

    def before_local(self, peer: Peer, round: int) -> None:
        """Hook before a peer's local training in `round` (e.g. snapshot the model it starts from)."""

    def after_backward(self, peer: Peer) -> None:
        """Hook between backward and the optimiser step (gradient corrections)."""

    def after_local(self, peer: Peer, round: int) -> None:
        """Hook after a peer's local training in `round`."""

    # ------------------------------------------------------------------ set-up
    def setup(self) -> None:
        self.load_data()
        device = self.ctx.device
        for p in self.ctx.local_peers:
            model = self.build_model(p)
            peer = self.record(id=p, model=model, data=self.shard(p),
                               augment_rng=torch_generator(self.cfg.seed, p, "augment", device),
                               optimizer=self.make_optimizer(self.trainable(model)))
            self.init_peer(peer)
            self.peers[p] = peer

    # ------------------------------------------------------------------ optimisers and schedule
    @staticmethod
    def trainable(model: nn.Module) -> list[nn.Parameter]:
        return [p for p in model.parameters() if p.requires_grad]

    def lr_at(self, round: int) -> float:
        """The learning rate of `round` under --schedule."""
        return optim.lr_at(self.cfg, round)

    def make_optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        """A fresh --optimizer over `params`."""
        return optim.make_optimizer(params, self.cfg)

    def for_round(self, opt: torch.optim.Optimizer, round: int) -> torch.optim.Optimizer:
        """`opt` ready for `round`: its state reset (as new) unless --keep-optimizer, its learning rate set."""
        if not self.cfg.keep_optimizer:
            opt.state.clear()
        for group in opt.param_groups:
            group["lr"] = self.lr_at(round)
        return opt

    # ------------------------------------------------------------------ the local loop
    def batch_size(self, peer: Peer) -> int:
        return max(2, min(self.cfg.batch_size, len(peer.data)))

    def steps(self, peer: Peer) -> int:
        """Local steps of the peer this round: --local-steps, else --local-epochs of its shard; a straggler
        (--stragglers) does its share of them, at least one."""
        if self.cfg.local_steps is not None:
            full = self.cfg.local_steps
        else:
            full = max(1, round(self.cfg.local_epochs * peer.data.steps_per_epoch(self.batch_size(peer))))
        work = self.net.work_fraction(peer.id)
        return full if work >= 1.0 else max(1, round(work * full))

    def local_update(self, peer_id: int, round: int) -> dict[str, float]:
        """The peer's local round; an update that turns non-finite is rolled back (or ends the job, with
        --on-nonfinite abort) so that a peer never mixes or keeps a poisoned model."""
        peer = self.peers[peer_id]
        before = {k: v.detach().clone() for k, v in peer.model.state_dict().items()}
        metrics = self._train(peer, round)
        state = [v for v in peer.model.state_dict().values() if v.is_floating_point()]
        if math.isfinite(metrics["loss"]) and all(bool(torch.isfinite(v).all()) for v in state):
            return metrics
        if self.cfg.on_nonfinite == "abort":
            raise RuntimeError(f"peer {peer_id}'s update turned non-finite in round {round} (--on-nonfinite abort)")
        peer.model.load_state_dict(before)
        peer.optimizer.state.clear()
        self.rolled_back.append(peer_id)
        return metrics

    def _train(self, peer: Peer, round: int) -> dict[str, float]:
        self.before_local(peer, round)
        peer.model.train()
        opt = self.for_round(peer.optimizer, round)
        total, steps, size = 0.0, self.steps(peer), self.batch_size(peer)
        for _ in range(steps):
            x, y = peer.data.next_batch(size)
            loss = self.batch_loss(peer, x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            self.after_backward(peer)
            opt.step()
            total += float(loss.detach())
        self.after_local(peer, round)
        return {"loss": total / steps}
