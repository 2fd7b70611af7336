"""Co-located peers trained as one computation (--batch-peers).

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

from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from torch.func import functional_call, vmap
from torch.utils._pytree import tree_map

from p2pfl.algorithms.peer import Peer
from p2pfl.data.loader import ShardPool
from p2pfl.models.stacked import PeerStack, fold, peer_stacked, unfold, why_not_stackable
from p2pfl.stacked_optim import StackedOptimizer

if TYPE_CHECKING:
    from p2pfl.algorithms.trainer import LocalTrainer

#: Peers per stacked computation on a CPU: more peers make activations that no longer fit the caches
#: (benchmarks/bench_batched_peers.py measured the choice).
CPU_CHUNK = 16
#: Encoders whose stacked step beats the loop on a CPU (benchmarks/bench_batched_peers.py, 2-core machine,
#: 2026-12-01: simple-cnn 2.3x at 20 and 100 peers; resnet-small 1.05-1.09x, within the machine's noise).
#: `auto` batches the others on GPUs only; `on` batches any stackable model.
CPU_FASTER = frozenset({"simple-cnn"})


def batching_verdict(trainer: LocalTrainer, mode: str) -> tuple[bool, str]:
    """(batch the rank's peers?, why) for --batch-peers `mode` (auto, on, off); `on` where the method or the
    model cannot raises ValueError naming what prevents it."""
    if mode == "off":
        return False, "--batch-peers off"
    reason = None
    if not trainer.batchable:
        reason = f"--algorithm {trainer.name} does not support --batch-peers yet"
    else:
        first = trainer.peers[trainer.ctx.local_peers[0]]
        why = why_not_stackable(first.model)
        if why is not None:
            reason = f"--model {trainer.cfg.model} cannot run peer-stacked ({why})"
    if reason is not None:
        if mode == "on":
            raise ValueError(f"--batch-peers on: {reason}; use --batch-peers auto or off")
        return False, reason
    if len(trainer.peers) < 2:
        return False, "this rank hosts a single peer"
    if mode == "auto" and trainer.ctx.device.type == "cpu" and trainer.cfg.model not in CPU_FASTER:
        return False, f"on a CPU, --model {trainer.cfg.model} trains faster peer by peer (use on to force)"
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
    """The peer-stacked local rounds of a trainer's peers."""

    def __init__(self, trainer: LocalTrainer, chunk: int | None = None) -> None:
        self.trainer = trainer
        self.cfg = trainer.cfg
        first = trainer.peers[trainer.ctx.local_peers[0]]
        self.stacked = peer_stacked(first.model)
        self.chunk = chunk or (CPU_CHUNK if trainer.ctx.device.type == "cpu" else 1 << 30)
        self.channels_last = trainer.ctx.device.type == "cpu"
        datas = [trainer.peers[p].data for p in trainer.ctx.local_peers]
        try:  # a step's batches of a whole group as one gather
            self.pool: ShardPool | None = ShardPool(datas)
        except ValueError:
            self.pool = None

    def groups(self, peers: list[int]) -> list[list[Peer]]:
        """The given peers as groups that train together (ordered by steps, most first), at most `chunk` each."""
        t = self.trainer
        by_key: dict[Any, list[Peer]] = {}
        for p in peers:
            peer = t.peers[p]
            by_key.setdefault((t.batch_size(peer), t.batch_key(peer)), []).append(peer)
        out = []
        for members in by_key.values():
            members.sort(key=lambda peer: (-t.steps(peer), peer.id))
            out.extend(members[i:i + self.chunk] for i in range(0, len(members), self.chunk))
        return out

    def train(self, peers: list[int], round: int) -> dict[int, dict[str, float]]:
        """Every given peer's local round; the metrics are the loop's (`LocalTrainer.local_update`)."""
        out: dict[int, dict[str, float]] = {}
        for group in self.groups(peers):
            if len(group) == 1:
                out[group[0].id] = self.trainer.local_update(group[0].id, round)
            else:
                out.update(self.train_group(group, round))
        return {p: out[p] for p in peers}

    def train_group(self, group: list[Peer], round: int) -> dict[int, dict[str, float]]:
        t = self.trainer
        for peer in group:
            t.before_local(peer, round)
            peer.model.train()
        steps = [t.steps(peer) for peer in group]
        size = t.batch_size(group[0])
        stack = PeerStack([peer.model for peer in group])
        before = stack.clone()  # what a peer whose update turns non-finite returns to (before_local keeps models)
        refs = [PeerStack(list(models)) for models in zip(*(t.references(peer) for peer in group))]
        start = {k: stack.params[k].clone() for k in stack.trainable} if t.penalized else None
        opt = self.optimizer(group, stack, round)
        device = t.ctx.device
        totals = torch.zeros(len(group), dtype=torch.float64, device=device)
        terms: dict[str, torch.Tensor] = {}
        datas = [peer.data for peer in group]
        pool = self.pool if self.pool is not None and self.pool.holds(datas) else None
        offsets = pool.offsets(datas) if pool is not None else None
        for s in range(max(steps)):
            n = sum(1 for k in steps if k > s)
            members = group[:n]
            x, y = self.next_batches(members, pool, offsets, size)
            xs = x.view(n, size, *x.shape[1:]).unbind(0)
            draws = _cat([t.draw(peer, xp) for peer, xp in zip(members, xs)])
            inputs = t.apply(x, draws)
            views = inputs.shape[0] // (n * size)
            inputs = fold(inputs.view(views, n, size, *inputs.shape[1:]).transpose(0, 1)
                          .reshape(n, views * size, *inputs.shape[1:]), channels_last=self.channels_last)
            params, buffers = stack.prefix(n, grad=True)
            self.stacked.train()
            out = functional_call(self.stacked, (params, buffers), (inputs,))
            per_peer = partial(_per_peer, n=n)
            ref_out = []
            if refs:
                self.stacked.eval()
                with torch.no_grad():
                    ref_out = [per_peer(functional_call(self.stacked, r.prefix(n), (inputs,))) for r in refs]
                self.stacked.train()
            loss, step_terms = vmap(t.criterion)(per_peer(out), y, ref_out)
            leaves = [params[k] for k in stack.trainable]
            if start is not None:
                loss = loss + t.penalty(leaves, [start[k][:n] for k in stack.trainable])
            grads = torch.autograd.grad(loss.sum(), leaves)
            opt.step(list(grads), n)
            totals[:n] += loss.detach().double()
            if t.step_losses is not None:
                for peer, value in zip(members, loss.detach().tolist()):
                    t.step_losses.setdefault(peer.id, []).append(value)
            for k, v in step_terms.items():
                terms.setdefault(k, torch.zeros(len(group), device=device))[:n] += v.detach()
        finite = stack.finite().tolist()
        stack.write_back([peer.model for peer in group])
        if self.cfg.keep_optimizer:
            opt.export_to([peer.optimizer for peer in group], [t.trainable(peer.model) for peer in group])
        totals_, terms_ = totals.tolist(), {k: v.tolist() for k, v in terms.items()}
        metrics = {}
        for i, peer in enumerate(group):
            t.after_local(peer, round)
            m = {"loss": totals_[i] / steps[i], **{k: v[i] / steps[i] for k, v in terms_.items()}}
            metrics[peer.id] = t.guard(peer, round, m, partial(before.write_back, [peer.model], [i]), finite[i])
        return metrics

    @staticmethod
    def next_batches(members: list[Peer], pool: ShardPool | None, offsets: torch.Tensor | None, size: int
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """The members' next batches: images [n·size, ...] peer after peer, targets [n, size]; one gather from
        the pool when it holds their shards, else peer by peer (the same images either way)."""
        if pool is not None:
            return pool.next_batches([peer.data for peer in members], offsets, size)
        batches = [peer.data.next_batch(size) for peer in members]
        return torch.cat([x for x, _ in batches]), torch.stack([y for _, y in batches])

    def optimizer(self, group: list[Peer], stack: PeerStack, round: int) -> StackedOptimizer:
        """The group's optimiser for `round`: fresh (the loop resets each peer's every round) or, with
        --keep-optimizer, carrying the peers' own optimiser state."""
        cfg, t = self.cfg, self.trainer
        opt = StackedOptimizer([stack.params[k] for k in stack.trainable], cfg.optimizer, lr=t.lr_at(round),
                               momentum=cfg.momentum, weight_decay=cfg.weight_decay)
        if cfg.keep_optimizer:
            opt.load_from([peer.optimizer for peer in group], [t.trainable(peer.model) for peer in group])
        return opt
