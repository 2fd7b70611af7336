"""The local trainer: what every training method does on its own shard between two communications.

A method on top of it declares its peer record (`record`), builds each peer's model and shard, and supplies its
loss on a batch (`batch_loss`) and, where it needs them, hooks around a peer's local round (`before_local`,
`after_backward`, `after_local`, `init_peer`). The trainer holds the rest once: the per-peer records,
optimisers and their per-round reset, learning-rate schedules, the batch size and number of steps, and the
local loop. Checkpoints of the records are generic (`p2pfl.runtime.checkpoint`).

A method whose step splits into an augmentation (`draw`, `apply`), a forward pass of the peer's model and of
its reference models (`references`), a criterion on their outputs (`criterion`) and a penalty on the
parameters (`penalty`) sets `batchable`; its co-located peers can then train as one computation
(`p2pfl.algorithms.batched`, --batch-peers), and its peer-by-peer loop is built from the same pieces.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from typing import Any, ClassVar

import torch
from torch import nn

from p2pfl import optim
from p2pfl.algorithms.peer import Peer
from p2pfl.data import PeerData
from p2pfl.models.params import state_copy
from p2pfl.rounds import Algorithm, RunContext
from p2pfl.seeding import torch_generator


class LocalTrainer(Algorithm):
    """Peers that train their own model on their own shard (the local phase of SPEC §2)."""

    #: The dataclass of what one peer holds; methods with state of their own subclass `Peer`.
    record: ClassVar[type[Peer]] = Peer
    #: False for the baselines that never talk to their neighbours.
    communicates: ClassVar[bool] = True
    #: The local step is draw → apply → model and references → criterion + penalty (see the module doc), with
    #: no other per-step state, so co-located peers may train peer-stacked (--batch-peers).
    batchable: ClassVar[bool] = False
    #: The method adds `penalty` to its loss (its peer records then hold `start`).
    penalized: ClassVar[bool] = False

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.peers: dict[int, Peer] = {}
        self.batched = None  # p2pfl.algorithms.batched.BatchedPeers when --batch-peers applies
        #: When a dict, every local step's loss is appended under its peer (tests compare the two paths by it).
        self.step_losses: dict[int, list[float]] | None = None

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
        """The loss of one batch of uint8 images `x` with targets `y` (augmentation is the method's). Methods
        built from the pieces below need not define it: it is then their augmentation followed by `loss_on`."""
        return self.loss_on(peer, self.apply(x, self.draw(peer, x)), y)[0]

    # ------------------------------------------------------------------ the pieces of a batchable step
    def draw(self, peer: Peer, x: torch.Tensor) -> Any:
        """The random draws of the batch's augmentation from the peer's stream: tensors (in dicts, tuples or
        lists) whose first axis is the batch, so that several peers' draws concatenate."""
        raise NotImplementedError

    def apply(self, x: torch.Tensor, draws: Any) -> torch.Tensor:
        """The model input for uint8 images `x` under `draws`; several views of a batch come view after view."""
        raise NotImplementedError

    def references(self, peer: Peer) -> list[nn.Module]:
        """Models run without gradients on the same input as the peer's model (MOON's reference models)."""
        return []

    def criterion(self, out: Any, y: torch.Tensor, refs: list[Any]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(loss, named terms to report) of one peer from its model's output, the targets and the references'
        outputs; a pure function of tensors (it also runs under torch.func.vmap)."""
        raise NotImplementedError

    def penalty(self, params: list[torch.Tensor], start: list[torch.Tensor]) -> torch.Tensor:
        """A penalty per peer on its trainable parameters and those it started the round with, each stacked
        over peers ([n, *shape]) -> [n] (methods with `penalized`)."""
        raise NotImplementedError

    def batch_key(self, peer: Peer) -> Hashable:
        """Peers train together only when their keys agree (e.g. MOON's pool length)."""
        return None

    def step_loss(self, peer: Peer, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The loss of one local step of `peer` on the batch, and the terms it reports: the method's own
        `batch_loss` where it has one (or a test replaced it), else the pieces."""
        if getattr(self.batch_loss, "__func__", None) is not LocalTrainer.batch_loss:
            return self.batch_loss(peer, x, y), {}
        return self.loss_on(peer, self.apply(x, self.draw(peer, x)), y)

    def loss_on(self, peer: Peer, inputs: torch.Tensor, y: torch.Tensor
                ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(loss, terms) of `peer` on already augmented, normalised `inputs`: its model and references, the
        criterion, the penalty."""
        out = peer.model(inputs)
        with torch.no_grad():
            refs = [ref(inputs) for ref in self.references(peer)]
        loss, terms = self.criterion(out, y, refs)
        if self.penalized:  # its records keep `start`, the parameters the peer started the round with
            extra = self.penalty([p.unsqueeze(0) for p in self.trainable(peer.model)],
                                 [p.unsqueeze(0) for p in peer.start])
            loss = loss + extra[0]
        return loss, terms

    def init_peer(self, peer: Peer) -> None:
        """Fill the method's own fields of a freshly built record."""

    def before_local(self, peer: Peer, round: int) -> None:
        """Hook before a peer's local training in `round` (e.g. snapshot the model it starts from). It must
        not change the peer's model: the batched path takes its roll-back point after it."""

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
        self.setup_batching()

    def setup_batching(self) -> None:
        """Decide --batch-peers for this rank's peers and say so in the manifest (every rank's verdict)."""
        from p2pfl.algorithms.batched import BatchedPeers, batching_verdict
        batched, why = batching_verdict(self, self.cfg.batch_peers)
        self.batched = BatchedPeers(self) if batched else None
        verdicts = self.ctx.world.allgather({"batched": batched, "why": why})
        self.ctx.record_manifest(batch_peers={"mode": self.cfg.batch_peers, "ranks": verdicts})
        self.record_memory()

    def record_memory(self) -> None:
        """The manifest's bytes per peer: model, optimiser state (once it has stepped), training shard."""
        from p2pfl.runtime.memory import peer_bytes
        mine = [peer_bytes(peer.model, self.cfg.optimizer, self.cfg.momentum, (peer.data.x, peer.data.y))
                for peer in self.peers.values()]
        every = [b for part in self.ctx.world.allgather(mine) for b in part]
        shards = [b["shard_bytes"] for b in every]
        self.ctx.record_manifest(memory={
            "parameters_bytes_per_peer": max(b["parameters_bytes"] for b in every),
            "optimizer_bytes_per_peer": max(b["optimizer_bytes"] for b in every),
            "shard_bytes_mean": sum(shards) / len(shards), "shard_bytes_max": max(shards)})

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

    def full_steps(self, peer: Peer) -> int:
        """Local steps of a full round of the peer: --local-steps, else --local-epochs of its shard."""
        if self.cfg.local_steps is not None:
            return self.cfg.local_steps
        return max(1, round(self.cfg.local_epochs * peer.data.steps_per_epoch(self.batch_size(peer))))

    def steps(self, peer: Peer) -> int:
        """Local steps of the peer this round: `full_steps`; a straggler (--stragglers) does its share of them,
        at least one."""
        full = self.full_steps(peer)
        work = self.net.work_fraction(peer.id)
        return full if work >= 1.0 else max(1, round(work * full))

    def local_updates(self, peers: list[int], round: int) -> dict[int, dict[str, float]]:
        if self.batched is not None:
            return self.batched.train(peers, round)
        return super().local_updates(peers, round)

    def local_update(self, peer_id: int, round: int) -> dict[str, float]:
        """The peer's local round; an update that turns non-finite is rolled back (or ends the job, with
        --on-nonfinite abort) so that a peer never mixes or keeps a poisoned model."""
        peer = self.peers[peer_id]
        before = self.snapshot(peer)
        return self.guard(peer, round, self._train(peer, round), before)

    @staticmethod
    def snapshot(peer: Peer) -> dict[str, torch.Tensor]:
        """A copy of the peer's model state to roll back to."""
        return state_copy(peer.model)

    def guard(self, peer: Peer, round: int, metrics: dict[str, float],
              before: dict[str, torch.Tensor] | Callable[[], None], finite: bool | None = None) -> dict[str, float]:
        """`metrics` of a finished local round; a non-finite outcome is rolled back to `before` (a state dict,
        or what restores it) or aborts. `finite`: whether the model is finite, when the caller already knows."""
        if finite is None:
            state = [v for v in peer.model.state_dict().values() if v.is_floating_point()]
            finite = all(bool(torch.isfinite(v).all()) for v in state)
        if math.isfinite(metrics["loss"]) and finite:
            return metrics
        if self.cfg.on_nonfinite == "abort":
            raise RuntimeError(f"peer {peer.id}'s update turned non-finite in round {round} (--on-nonfinite abort)")
        if callable(before):
            before()
        else:
            peer.model.load_state_dict(before)
        peer.optimizer.state.clear()
        self.rolled_back.append(peer.id)
        return metrics

    def _train(self, peer: Peer, round: int) -> dict[str, float]:
        self.before_local(peer, round)
        peer.model.train()
        opt = self.for_round(peer.optimizer, round)
        total, steps, size = 0.0, self.steps(peer), self.batch_size(peer)
        terms: dict[str, torch.Tensor] = {}
        for _ in range(steps):
            x, y = peer.data.next_batch(size)
            loss, step_terms = self.step_loss(peer, x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            self.after_backward(peer)
            opt.step()
            total += float(loss.detach())
            if self.step_losses is not None:
                self.step_losses.setdefault(peer.id, []).append(float(loss.detach()))
            for k, v in step_terms.items():
                terms[k] = terms.get(k, 0.0) + v.detach()
        self.after_local(peer, round)
        return {"loss": total / steps, **{k: float(v) / steps for k, v in terms.items()}}
