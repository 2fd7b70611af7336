"""Co-located peers trained as one computation (--batch-peers): the peer-stacked step of the one local loop
(`p2pfl.algorithms.trainer.LocalTrainer.train_group`, which also forms the groups), behind
`p2pfl.algorithms.local_batch.LocalRun`; a method's `local_loss` sees the step's `StackedBatch`.

The active peers a rank hosts are grouped by what must agree for one computation: their batch size and the
method's `batch_key` (a group of one trains peer by peer). Within a group, the peers are ordered by their number
of local steps, most first, so that the peers still training at any step are a prefix: their stacked
parameters and optimiser state are views, and a peer that has finished (fewer steps: a smaller shard, a
straggler) is simply left out of the remaining steps. Every step each peer draws its own batch from its data
stream and its own augmentation from its stream (as in the loop, so each peer sees exactly what it would alone);
the images of all of them are one gather from the rank's shards held as one tensor (p2pfl.data.loader.ShardPool),
the augmentation then runs once on all the images, the models run peer-stacked (p2pfl.models.stacked; on a CPU
in the channels-last memory format, where oneDNN's grouped convolutions and their backward are faster), the
method's criterion runs per peer under torch.func.vmap, and one optimiser step updates every peer
(p2pfl.stacked_optim: per-peer step counts, the same formulas as torch.optim).

What stays per peer, and unchanged: the records (models, optimisers, data cursors and streams), so gossip,
checkpoints and resume do not know whether a round was batched. The loop and the batched path agree up to float
summation order (tests/test_batched_peers.py states the tolerance).
"""
from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, vmap
from torch.utils._pytree import tree_map

from p2pfl import optim
from p2pfl.algorithms.local_batch import Criterion, LocalRun, PeerBatch, Penalty, StepLoss, trainable
from p2pfl.algorithms.peer import Peer
from p2pfl.config import RunConfig
from p2pfl.data import PeerData
from p2pfl.data.loader import ShardPool
from p2pfl.models.encoders import MODELS
from p2pfl.models.stacked import PeerStack, fold, peer_stacked, unfold, why_not_stackable
from p2pfl.privacy.dp_options import dp_on
from p2pfl.privacy.dp_sgd import DPStep, stacked_loss
from p2pfl.stacked_optim import StackedOptimizer

#: Peers per stacked computation on a CPU: more peers make activations that no longer fit the caches
#: (benchmarks/bench_batched_peers.py measured the choice).
CPU_CHUNK = 16
#: The capability of the models whose stacked step beats the loop on a CPU (benchmarks/bench_batched_peers.py,
#: 2-core machine, 2026-12-01: simple-cnn 2.3x at 20 and 100 peers; resnet-small 1.05-1.09x, within the machine's
#: noise). `auto` batches the others on GPUs only; `on` batches any stackable model.
CPU_FASTER = "cpu-stacked-faster"


def batching_verdict(mode: str, method: str, batchable: bool, cfg: RunConfig, model: nn.Module, peers: int,
                     device: torch.device) -> tuple[bool, str]:
    """(batch a rank's `peers` peers, whose first model is `model`?, why) for --batch-peers `mode` (auto, on,
    off); `on` where the method or the model cannot raises ValueError naming what prevents it."""
    if mode == "off":
        return False, "--batch-peers off"
    reason = None
    if not batchable:
        reason = f"--algorithm {method} does not support --batch-peers yet"
    else:
        why = why_not_stackable(model)
        if why is not None:
            reason = f"--model {cfg.model} cannot run peer-stacked ({why})"
    if reason is not None:
        if mode == "on":
            raise ValueError(f"--batch-peers on: {reason}; use --batch-peers auto or off")
        return False, reason
    if peers < 2:
        return False, "this rank hosts a single peer"
    if mode == "auto" and device.type == "cpu" and CPU_FASTER not in getattr(MODELS.selected(cfg), "capabilities", ()):
        return False, f"on a CPU, --model {cfg.model} trains faster peer by peer (use on to force)"
    # DP-SGD's per-sample gradients (vmap over the samples) ran 4.7-6.4 s a round peer by peer against 6.5-12 s
    # stacked (simple-cnn, 4 peers, 10 steps of 32 samples, a shared 2-core CPU, 2026-12-03)
    if mode == "auto" and device.type == "cpu" and dp_on(cfg):
        return False, "on a CPU, DP-SGD's per-sample gradients train faster peer by peer (use on to force)"
    return True, "co-located peers of one architecture"


def _cat(trees: list[Any]) -> Any:
    """Concatenate along the first axis the matching tensors of several peers' draws."""
    first = trees[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(trees)
    if isinstance(first, dict):
        return {k: _cat([t[k] for t in trees]) for k in first}
    return type(first)(_cat(list(parts)) for parts in zip(*trees))


def _per_peer(out: Any, n: int) -> Any:
    """A peer-stacked model output (tensors [N, n·D], possibly in a tuple) as per-peer tensors [n, N, D]."""
    return tree_map(lambda o: unfold(o, n), out)


class BatchedPeers:
    """The peer-stacked local rounds of a rank's peers: the stacked module, the chunk, the shard pool."""

    def __init__(self, cfg: RunConfig, first: nn.Module, datas: list[PeerData], device: torch.device,
                 lr_at: Callable[[int], float], chunk: int | None = None) -> None:
        self.cfg = cfg
        self.lr_at = lr_at
        self.stacked = peer_stacked(first)
        self.chunk = chunk or (CPU_CHUNK if device.type == "cpu" else 1 << 30)
        self.channels_last = device.type == "cpu"
        self.device = device
        try:  # a step's batches of a whole group as one gather
            self.pool: ShardPool | None = ShardPool(datas)
        except ValueError:
            self.pool = None

    def run(self, group: list[Peer], round: int, size: int, references: list[list[nn.Module]],
            private: DPStep | None = None) -> StackedRun:
        """The group's local round in `round` (batches of `size`; each member's reference models; DP-SGD's step
        with `private`)."""
        return StackedRun(self, group, round, size, references, private)

    def optimizer(self, group: list[Peer], stack: PeerStack, round: int) -> StackedOptimizer:
        """The group's optimiser for `round`: fresh (the loop resets each peer's every round) or, with
        --keep-optimizer, carrying the peers' own optimiser state."""
        cfg = self.cfg
        opt = StackedOptimizer([stack.params[k] for k in stack.trainable], cfg.optimizer, lr=self.lr_at(round),
                               momentum=optim.local_momentum(cfg), weight_decay=cfg.weight_decay,
                               nesterov=cfg.nesterov)
        if cfg.keep_optimizer:
            opt.load_from([peer.optimizer for peer in group], [trainable(peer.model) for peer in group])
        return opt


class StackedRun(LocalRun):
    """A group's local round as one computation: parameters and optimiser state stacked over the members."""

    def __init__(self, batched: BatchedPeers, group: list[Peer], round: int, size: int,
                 references: list[list[nn.Module]], private: DPStep | None = None) -> None:
        self.b, self.group, self.size, self.private = batched, group, size, private
        self.stack = PeerStack([peer.model for peer in group])
        self.before = self.stack.clone()  # what a peer whose update turns non-finite returns to
        self.refs = [PeerStack(list(models)) for models in zip(*references)]
        self.start: dict[str, torch.Tensor] | None = None  # the parameters the round started with (penalties)
        self.opt = batched.optimizer(group, self.stack, round)
        datas = [peer.data for peer in group]
        pool = batched.pool
        self.pool = pool if pool is not None and pool.holds(datas) else None
        self.offsets = self.pool.offsets(datas) if self.pool is not None else None
        self.leaves: list[torch.Tensor] = []

    def next_batches(self, members: list[Peer]) -> tuple[torch.Tensor, torch.Tensor]:
        """The members' next batches: images [n·size, ...] peer after peer, targets [n, size]; one gather from
        the pool when it holds their shards, else peer by peer (the same images either way)."""
        if self.pool is not None:
            return self.pool.next_batches([peer.data for peer in members], self.offsets, self.size)
        batches = [peer.data.next_batch(self.size) for peer in members]
        return torch.cat([x for x, _ in batches]), torch.stack([y for _, y in batches])

    def batch(self, n: int) -> PeerBatch:
        return StackedBatch(self, self.group[:n], *self.next_batches(self.group[:n]))

    def step(self, loss: torch.Tensor, n: int) -> None:
        grads = torch.autograd.grad(loss.sum(), self.leaves)
        self.opt.step(list(grads), n)

    def finish(self) -> list[bool]:
        finite = self.stack.finite().tolist()
        models = [peer.model for peer in self.group]
        self.stack.write_back(models)
        if self.b.cfg.keep_optimizer:
            self.opt.export_to([peer.optimizer for peer in self.group], [trainable(m) for m in models])
        return finite

    def roll_back(self, i: int) -> None:
        self.before.write_back([self.group[i].model], [i])


class StackedBatch(PeerBatch):
    """The batch of the first n members of a stacked run: images [n·size, ...], targets [n, size]."""

    def __init__(self, run: StackedRun, members: list[Peer], x: torch.Tensor, y: torch.Tensor) -> None:
        self.run, self.peers, self.x, self.y = run, members, x, y

    def augment(self, draw: Callable[[Peer, torch.Tensor], Any], apply: Callable[[torch.Tensor, Any], torch.Tensor]
                ) -> torch.Tensor:
        """The views of all members, folded for the stacked model: [N, n·views·size...] (p2pfl.models.stacked)."""
        n, size, x = len(self.peers), self.run.size, self.x
        xs = x.view(n, size, *x.shape[1:]).unbind(0)
        inputs = apply(x, _cat([draw(peer, xp) for peer, xp in zip(self.peers, xs)]))
        views = inputs.shape[0] // (n * size)
        return fold(inputs.view(views, n, size, *inputs.shape[1:]).transpose(0, 1)
                    .reshape(n, views * size, *inputs.shape[1:]), channels_last=self.run.b.channels_last)

    def model_loss(self, inputs: torch.Tensor, criterion: Criterion, penalty: Penalty | None = None) -> StepLoss:
        run, n = self.run, len(self.peers)
        stacked, stack = run.b.stacked, run.stack
        params, buffers = stack.prefix(n, grad=True)
        stacked.train()
        out = functional_call(stacked, (params, buffers), (inputs,)) if run.private is None else None
        per_peer = partial(_per_peer, n=n)
        ref_out = []
        if run.refs:
            stacked.eval()
            with torch.no_grad():
                ref_out = [per_peer(functional_call(stacked, r.prefix(n), (inputs,))) for r in run.refs]
            stacked.train()
        if run.private is None:
            loss, terms = vmap(criterion)(per_peer(out), self.y, ref_out)
        else:
            loss, terms = stacked_loss(run.private, stacked, params, buffers, stack.trainable, inputs, self.y,
                                       ref_out, n, per_peer, criterion)
        run.leaves = [params[k] for k in stack.trainable]
        if penalty is not None:
            if run.start is None:  # first used in the round's first step, before any update
                run.start = {k: stack.params[k].clone() for k in stack.trainable}
            loss = loss + penalty(run.leaves, [run.start[k][:n] for k in stack.trainable])
        return loss, terms

    def alone(self) -> tuple[Peer, torch.Tensor, torch.Tensor]:
        raise TypeError("a loss written peer by peer cannot train peer-stacked (the method is not batchable)")
