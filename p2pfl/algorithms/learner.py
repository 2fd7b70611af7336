"""Peers that train a model on their own shard and gossip its parameters: the base of every learning method.

A method supplies its network (`make_model`), its loss on a batch (`batch_loss`), optional hooks around a
peer's local round, and how a model is scored (`score`). Everything else is here once: shards, seeded
initialisation, optimisers and schedules, the local loop, gossip of the mixable state (FedBN aware), the
network average, per-peer evaluation and the weight drift.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from p2pfl import optim
from p2pfl.data import PeerData
from p2pfl.evaluation import weight_drift
from p2pfl.gossip import exact_mean, gossip
from p2pfl.models import MixableState, init_model
from p2pfl.rounds import Algorithm, RunContext
from p2pfl.seeding import SHARED, torch_generator
from p2pfl.workload import Workload, load_workload


class Learner(Algorithm):
    """Local training plus gossip of the model's mixable state (SPEC §2)."""

    communicates = True

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.work: Workload | None = None
        self.data: dict[int, PeerData] = {}
        self.models: dict[int, nn.Module] = {}
        self.mixable: dict[int, MixableState] = {}
        self.full: dict[int, MixableState] = {}
        self.buffers: dict[int, torch.Tensor] = {}
        self.optimizers: dict[int, torch.optim.Optimizer] = {}
        self.aug: dict[int, torch.Generator] = {}
        self._order: dict[int, torch.Tensor] = {}  # the current epoch's order of each shard
        self._pos: dict[int, int] = {}  # batches of it already used

    # ------------------------------------------------------------------ what a method supplies
    def make_model(self) -> nn.Module:
        raise NotImplementedError

    def batch_loss(self, peer: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The loss of one batch of uint8 images `x` with targets `y` (augmentation is the method's)."""
        raise NotImplementedError

    def before_local(self, peer: int, round: int) -> None:
        """Hook before a peer's local training in `round` (e.g. snapshot the model it starts from)."""

    def after_local(self, peer: int, round: int) -> None:
        """Hook after a peer's local training in `round`."""

    def score(self, model: nn.Module, peer: int | None, final: bool) -> dict[str, float]:
        """Metrics of one model (a peer's, or the network average when peer is None)."""
        return {}

    # ------------------------------------------------------------------ set-up
    @property
    def dataset(self):
        assert self.work is not None
        return self.work.dataset

    def setup(self) -> None:
        self.work = load_workload(self.ctx)
        device = self.ctx.device
        for peer in self.ctx.local_peers:
            self.data[peer] = self.work.shard(peer, self.cfg, device)
            model = self.new_model()
            self.models[peer] = model
            self.mixable[peer] = MixableState(model, fedbn=self.cfg.fedbn)
            self.full[peer] = MixableState(model)
            self.buffers[peer] = self.mixable[peer].new_buffer()
            self.aug[peer] = torch_generator(self.cfg.seed, peer, "augment", device)
        self.ctx.record_manifest(model={"name": self.cfg.model, "parameters": self.full[self.ctx.local_peers[0]].numel,
                                        "mixed_per_message": self.mixable[self.ctx.local_peers[0]].numel})

    def new_model(self) -> nn.Module:
        """A model with the common initialisation every peer starts from (stream (seed, SHARED, 'init'))."""
        model = self.make_model()
        init_model(model, torch_generator(self.cfg.seed, SHARED, "init"))
        return model.to(self.ctx.device)

    # ------------------------------------------------------------------ local training
    def lr_at(self, round: int) -> float:
        """The learning rate of `round` under --schedule."""
        return optim.lr_at(self.cfg, round)

    def trainable(self, peer: int) -> list[nn.Parameter]:
        return [p for p in self.models[peer].parameters() if p.requires_grad]

    def optimizer(self, peer: int, round: int) -> torch.optim.Optimizer:
        """The peer's optimiser for this round: new each round unless --keep-optimizer."""
        cfg = self.cfg
        opt = self.optimizers.get(peer) if cfg.keep_optimizer else None
        if opt is None:
            opt = self.optimizers[peer] = self.make_optimizer(self.trainable(peer))
        for group in opt.param_groups:
            group["lr"] = self.lr_at(round)
        return opt

    def make_optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        """A fresh optimiser of the configured kind over `params`."""
        return optim.make_optimizer(params, self.cfg)

    def batch_size(self, peer: int) -> int:
        return max(2, min(self.cfg.batch_size, len(self.data[peer])))

    def steps(self, peer: int) -> int:
        if self.cfg.local_steps is not None:
            return self.cfg.local_steps
        per_epoch = self.data[peer].steps_per_epoch(self.batch_size(peer))
        return max(1, round(self.cfg.local_epochs * per_epoch))

    def next_batch(self, peer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The next batch of the peer's endless sequence of shuffled epochs (drop-last batching)."""
        data, size = self.data[peer], self.batch_size(peer)
        pos = self._pos.get(peer, 0)
        if peer not in self._order or pos >= data.steps_per_epoch(size):
            self._order[peer], pos = data.permutation(), 0
        idx = self._order[peer][pos * size:(pos + 1) * size]
        self._pos[peer] = pos + 1
        return data.x[idx], data.y[idx]

    def local_update(self, peer: int, round: int) -> dict[str, float]:
        model = self.models[peer]
        self.before_local(peer, round)
        model.train()
        opt = self.optimizer(peer, round)
        total, steps = 0.0, self.steps(peer)
        for _ in range(steps):
            x, y = self.next_batch(peer)
            loss = self.batch_loss(peer, x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            self.after_backward(peer)
            opt.step()
            total += float(loss.detach())
        self.after_local(peer, round)
        return {"loss": total / steps}

    def after_backward(self, peer: int) -> None:
        """Hook between backward and the optimiser step (gradient corrections)."""

    # ------------------------------------------------------------------ communication
    def mix_sizes(self) -> list[float] | None:
        if not self.cfg.weight_by_data:
            return None
        assert self.work is not None
        return [float(p.size) for p in self.work.parts]

    def communicate(self, round: int, active: set[int]) -> None:
        if not self.communicates:
            return
        vectors = {p: self.mixable[p].flatten(self.buffers[p]) for p in self.ctx.local_peers if p in active}
        mixed = gossip(self.ctx.exchange, self.ctx.W, vectors, round, active, self.mix_sizes())
        for p, vec in mixed.items():
            self.mixable[p].unflatten_(vec)

    def consensus_vectors(self) -> dict[int, torch.Tensor]:
        return {p: self.mixable[p].flatten(self.buffers[p]) for p in self.ctx.local_peers}

    # ------------------------------------------------------------------ evaluation
    def average_model(self) -> nn.Module:
        """The network average x̄ of the peers' full states (BatchNorm included); collective."""
        mean = exact_mean(self.ctx.world, {p: s.flatten() for p, s in self.full.items()}, self.ctx.n_peers)
        model = self.new_model()
        MixableState(model).unflatten_(mean.float().to(self.ctx.device))
        return model

    def evaluate(self, round: int, final: bool) -> tuple[dict[str, float], dict[int, dict[str, float]]]:
        avg = self.average_model()
        avg.eval()
        metrics: dict[str, float] = {}
        if self.ctx.world.is_root:
            metrics = {f"{k}_avg": v for k, v in self.score(avg, None, final).items()}
        per_peer: dict[int, dict[str, float]] = {}
        if final:
            between = self.neighbour_drift(round)
            for p, model in self.models.items():
                model.eval()
                per_peer[p] = {**self.score(model, p, final), "drift_to_avg": weight_drift(model, avg),
                               "drift_to_neighbours": between[p]}
        return metrics, per_peer

    def neighbour_drift(self, round: int) -> dict[int, float]:
        """Mean d_w between each local peer and its graph neighbours (one extra exchange of full states)."""
        vectors = {p: s.flatten() for p, s in self.full.items()}
        inbox = self.ctx.exchange.exchange(vectors, round, kind="params")
        out = {}
        for p, received in inbox.items():
            state = self.full[p]
            params = {n for n, _ in self.models[p].named_parameters()}
            mine = dict(zip(state.names, vectors[p].split(state.sizes)))
            drifts = []
            for q in sorted(received):
                theirs = dict(zip(state.names, received[q].split(state.sizes)))
                drifts.append(weight_drift({n: mine[n] for n in params}, {n: theirs[n] for n in params}))
            out[p] = sum(drifts) / len(drifts) if drifts else 0.0
        return out

    def peer_state(self, peer: int) -> dict[str, Any]:
        state: dict[str, Any] = {"model": self.models[peer].state_dict(),
                                 "augment_rng": self.aug[peer].get_state(),
                                 "data_rng": self.data[peer].generator.get_state(),
                                 "epoch_order": self._order.get(peer), "epoch_pos": self._pos.get(peer, 0)}
        if peer in self.optimizers and self.cfg.keep_optimizer:
            state["optimizer"] = self.optimizers[peer].state_dict()
        return state

    def load_peer_state(self, peer: int, state: dict[str, Any]) -> None:
        self.models[peer].load_state_dict(state["model"])
        self.aug[peer].set_state(state["augment_rng"])
        self.data[peer].generator.set_state(state["data_rng"])
        if state["epoch_order"] is not None:
            self._order[peer] = state["epoch_order"].to(self.ctx.device)
        self._pos[peer] = state["epoch_pos"]
        if "optimizer" in state:
            self.optimizer(peer, 1).load_state_dict(state["optimizer"])
