"""The local trainer: what every training method does on its own shard between two communications.

A method on top of it declares its peer record (`record`), builds each peer's model and shard, states its loss
in one place, `local_loss(batch)` (see below), and, where it needs them, hooks around a peer's local round
(`before_local`, `after_backward`, `after_local`, `init_peer`). The trainer holds the rest once: the per-peer
records, optimisers and their per-round reset, learning-rate schedules, the batch size and number of steps, and
the one local loop (`train_group`), which runs a peer alone (`OnePeer`) or a rank's co-located peers as one
peer-stacked computation (`p2pfl.algorithms.batched`, --batch-peers) with the same orchestration. Checkpoints of
the records are generic (`p2pfl.runtime.checkpoint`).

`local_loss` takes a `p2pfl.algorithms.local_batch.PeerBatch`: the step's batch of one peer or, when the method
declares the capability BATCHABLE (its loss is the default's pieces, with no other per-step state), of several.
Its default is built from pieces: an augmentation (`draw`, `apply`), a forward pass of the peer's model and of its
reference models (`references`), a criterion on their outputs (`criterion`) and a penalty on the parameters
(`penalty`, with `penalized`); those work for a group. A method whose loss does not split so overrides
`local_loss` and takes `batch.alone()`.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from functools import partial
from typing import Any, ClassVar

import torch
from torch import nn

from p2pfl import optim
from p2pfl.algorithms.batched import BatchedPeers, batching_verdict
from p2pfl.algorithms.local_batch import Criterion, LocalRun, PeerBatch, Penalty, StepLoss, trainable
from p2pfl.algorithms.peer import Peer
from p2pfl.context import RunContext
from p2pfl.data import PeerData
from p2pfl.method import BATCHABLE, Algorithm, LocalRound
from p2pfl.models.params import state_copy
from p2pfl.models.probe import probe
from p2pfl.network import RoundNetwork
from p2pfl.privacy.dp_options import dp_on
from p2pfl.privacy.dp_sgd import DPSGD, DPStep, one_peer_loss, refuse_model
from p2pfl.records import DP_EPSILON
from p2pfl.seeding import torch_generator


class LocalTrainer(Algorithm):
    """Peers that train their own model on their own shard (the local phase of SPEC §2)."""

    #: The dataclass of what one peer holds; methods with state of their own subclass `Peer`.
    record: ClassVar[type[Peer]] = Peer
    #: False for the baselines that never talk to their neighbours.
    communicates: ClassVar[bool] = True
    #: The method adds `penalty` to its loss (its peer records then hold `start`).
    penalized: ClassVar[bool] = False

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.peers: dict[int, Peer] = {}
        self.batched: BatchedPeers | None = None  # when --batch-peers applies
        #: When a dict, every local step's loss is appended under its peer (tests compare the two paths by it).
        self.step_losses: dict[int, list[float]] | None = None
        self.dp: DPSGD | None = None  # with --dp-clip (p2pfl.privacy.dp_sgd)

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

    def local_loss(self, batch: PeerBatch) -> StepLoss:
        """The method's loss of one local step: one loss per peer of `batch` ([n]; a scalar for a batch of one)
        and named terms to report. By default the pieces below: the augmentation, the models and references,
        the criterion and, with `penalized`, the penalty. A loss that does not split so overrides this and
        reads `batch.alone()` (one peer's uint8 images and targets; augmentation is the method's)."""
        return batch.model_loss(batch.augment(self.draw, self.apply), self.criterion,
                                self.penalty if self.penalized else None)

    def batch_loss(self, peer: Peer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The loss of `peer` on one uint8 batch, as a local step computes it (`local_loss`), for tests and
        tools; not a way to state a loss."""
        return self.local_loss(OneBatch(peer, x, y, self.references(peer)))[0]

    # ------------------------------------------------------------------ the pieces of the default loss
    def draw(self, peer: Peer, x: torch.Tensor) -> Any:
        """The random draws of the batch's augmentation from the peer's stream: tensors (in dicts, tuples or
        lists) whose first axis is the batch, so that several peers' draws concatenate."""
        raise NotImplementedError

    def apply(self, x: torch.Tensor, draws: Any) -> torch.Tensor:
        """The model input for uint8 images `x` under `draws`; several views of a batch come view after view."""
        raise NotImplementedError

    def references(self, peer: Peer) -> list[nn.Module]:
        """Models run without gradients on the same input as the peer's model (MOON's reference models); the
        same modules for the whole local round."""
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

    # ------------------------------------------------------------------ hooks
    def init_peer(self, peer: Peer) -> None:
        """Fill the method's own fields of a freshly built record."""

    def before_local(self, peer: Peer, round: int) -> None:
        """Hook before a peer's local training in `round` (e.g. snapshot the model it starts from). It must
        not change the peer's model: the roll-back point is taken after it."""

    def after_backward(self, peer: Peer) -> None:
        """Hook between backward and the optimiser step of a peer trained alone (gradient corrections; a
        BATCHABLE method has none)."""

    def after_local(self, peer: Peer, round: int, steps: int) -> None:
        """Hook after a peer's `steps` local steps in `round` whose update the non-finite guard accepted (e.g.
        record the trained model). A peer whose update is rolled back skips it, so what a method records here
        holds only accepted updates: a roll-back needs nothing undone. State that changes during the steps
        themselves (BYOL's target, after every optimiser step) is the method's to restore on a roll-back."""

    # ------------------------------------------------------------------ set-up
    def setup(self) -> None:
        self.load_data()
        device = self.ctx.device
        for p in self.ctx.local_peers:
            model = self.build_model(p)
            peer = self.record(id=p, model=model, data=self.shard(p),
                               augment_rng=torch_generator(self.cfg.seed, p, "augment", device),
                               optimizer=partial(self.make_optimizer, self.trainable(model)))  # built when read
            self.init_peer(peer)
            self.peers[p] = peer
        if self.peers:  # a plug-in model's shape bug as one line now, not at the first training step
            first = self.peers[self.ctx.local_peers[0]]
            probe(self.cfg.model, first.model, first.data.first(2)[0])
        if dp_on(self.cfg):
            self.setup_dp()
        self.setup_batching()

    def setup_dp(self) -> None:
        """DP-SGD's accounting of this rank's peers (σ solved per peer for --dp-epsilon), its manifest entry (every
        rank's peers); a model or task whose per-sample gradients it cannot take is refused in one line."""
        refuse_model(self.peers[self.ctx.local_peers[0]].model, self.cfg.model)
        if getattr(getattr(self, "dataset", None), "tokens", False):
            raise ValueError("--dp-clip: DP-SGD does not take next-token prediction yet (each position's target is "
                             "read outside the per-sample loss)")
        self.dp = DPSGD.from_config(self.cfg, self.ctx.device)
        for p, peer in self.peers.items():
            self.dp.add_peer(p, len(peer.data), self.batch_size(peer), self.cfg.rounds * self.full_steps(peer))
        peers = {k: v for part in self.ctx.world.allgather(self.dp.record()) for k, v in part.items()}
        self.ctx.record_manifest(dp_sgd={**self.dp.settings(), "peers": dict(sorted(peers.items(), key=lambda kv:
                                                                                   int(kv[0])))})

    def summary(self) -> dict[str, Any]:
        """With DP-SGD, each peer's ε over the run and their largest (collective)."""
        out = super().summary()
        if self.dp is None:
            return out
        mine = {str(p): self.dp.epsilon(peer) for p, peer in self.peers.items()}
        every = {k: v for part in self.ctx.world.allgather(mine) for k, v in part.items()}
        every = dict(sorted(every.items(), key=lambda kv: int(kv[0])))
        return {**out, DP_EPSILON: every, DP_EPSILON + "_max": max(every.values()), "dp_delta": self.dp.delta}

    def summary_lines(self, summary: Any) -> list[str]:
        """With DP-SGD, the largest ε a peer spent."""
        lines = super().summary_lines(summary)
        if DP_EPSILON + "_max" in summary:
            lines.append(f"DP-SGD: every peer's epsilon <= {summary[DP_EPSILON + '_max']:.4g} at delta "
                         f"{summary['dp_delta']:g} (RDP accountant; each peer's in summary.json)")
        return lines

    def setup_batching(self) -> None:
        """Decide --batch-peers for this rank's peers and say so in the manifest (every rank's verdict)."""
        first = self.peers[self.ctx.local_peers[0]].model
        batched, why = batching_verdict(self.cfg.batch_peers, self.name, self.can(BATCHABLE), self.cfg, first,
                                        len(self.peers), self.ctx.device)
        datas = [self.peers[p].data for p in self.ctx.local_peers]
        self.batched = BatchedPeers(self.cfg, first, datas, self.ctx.device, self.lr_at) if batched else None
        verdicts = self.ctx.world.allgather({"batched": batched, "why": why})
        self.ctx.record_manifest(batch_peers={"mode": self.cfg.batch_peers, "ranks": verdicts})
        self.record_memory()

    def record_memory(self) -> None:
        """The manifest's bytes per peer: model, optimiser state (once it has stepped), what the training shard holds
        alone; and the training set the rank's shard views share (held once per rank; 0 where shards are copies)."""
        from p2pfl.runtime.memory import peer_bytes
        momentum = optim.local_momentum(self.cfg)
        mine = [{**peer_bytes(peer.model, self.cfg.optimizer, momentum, peer.data.own_bytes()),
                 "view": peer.data.rows is not None, "shared": peer.data.shared_bytes()}
                for peer in self.peers.values()]
        every = [b for part in self.ctx.world.allgather(mine) for b in part]
        shards = [b["shard_bytes"] for b in every]
        views = sum(b["view"] for b in every)
        self.ctx.record_manifest(memory={
            "parameters_bytes_per_peer": max(b["parameters_bytes"] for b in every),
            "optimizer_bytes_per_peer": max(b["optimizer_bytes"] for b in every),
            "shard_bytes_mean": sum(shards) / len(shards), "shard_bytes_max": max(shards),
            "shards": "views" if views == len(every) else "copies" if views == 0 else "views and copies",
            "shared_bytes_per_rank": max(b["shared"] for b in every)})

    # ------------------------------------------------------------------ optimisers and schedule
    trainable = staticmethod(trainable)

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

    def steps(self, peer: Peer, net: RoundNetwork) -> int:
        """Local steps of the peer in the round of `net`: `full_steps`; a straggler (--stragglers) does its
        share of them, at least one."""
        full = self.full_steps(peer)
        work = net.work_fraction(peer.id)
        return full if work >= 1.0 else max(1, round(work * full))

    def local_steps(self, peer: int, net: RoundNetwork) -> float:
        return float(self.steps(self.peers[peer], net))

    def local_update(self, peer_id: int, round: int, net: RoundNetwork | None = None) -> dict[str, float]:
        """One peer's local round alone, its metrics (a testing aid: `local_updates` also says what it rolled
        back). `net`: the round's network, by default the schedule's of `round`."""
        net = self.ctx.schedule.at(round) if net is None else net
        return self.local_updates([peer_id], round, net).metrics[peer_id]

    def local_updates(self, peers: list[int], round: int, net: RoundNetwork) -> LocalRound:
        """The given peers' local rounds: peer by peer, or in peer-stacked groups under --batch-peers. An
        update that turns non-finite is rolled back (or ends the job, with --on-nonfinite abort) so that a peer
        never mixes or keeps a poisoned model."""
        out = LocalRound()
        for group in self.groups(peers, net):
            self.train_group(group, round, net, out)
        out.metrics = {p: out.metrics[p] for p in peers}
        return out

    def groups(self, peers: list[int], net: RoundNetwork) -> list[list[Peer]]:
        """The peers as groups that train together: one by one, or with --batch-peers those whose batch size
        and `batch_key` agree, ordered by steps (most first, so the peers still training are a prefix), at most
        a chunk each."""
        if self.batched is None:
            return [[self.peers[p]] for p in peers]
        by_key: dict[Any, list[Peer]] = {}
        for p in peers:
            peer = self.peers[p]
            by_key.setdefault((self.batch_size(peer), self.batch_key(peer)), []).append(peer)
        out = []
        chunk = self.batched.chunk
        for members in by_key.values():
            members.sort(key=lambda peer: (-self.steps(peer, net), peer.id))
            out.extend(members[i:i + chunk] for i in range(0, len(members), chunk))
        return out

    def diverging(self, group: list[Peer]) -> list[float] | None:
        """--fault diverge@PEER:ROUND: a factor per member, NaN for a peer whose update this round is to turn
        non-finite (its loss, hence its gradients), else 1; None when no member is (the common case)."""
        diverging = self.ctx.checked.faults.diverging
        if not any(peer.id in diverging for peer in group):
            return None
        return [math.nan if peer.id in diverging else 1.0 for peer in group]

    def train_group(self, group: list[Peer], round: int, net: RoundNetwork, out: LocalRound) -> None:
        """The local round of a group (ordered by steps, most first) into `out`: the one local loop, whatever
        runs the steps (a peer alone, or the group peer-stacked)."""
        for peer in group:
            self.before_local(peer, round)
            peer.model.train()
        steps = [self.steps(peer, net) for peer in group]
        size = self.batch_size(group[0])
        references = [self.references(peer) for peer in group]
        private = None if self.dp is None else self.dp.round_step(group, size)
        if len(group) == 1:
            run: LocalRun = OnePeer(self, group[0], round, size, references[0], private)
        else:
            assert self.batched is not None
            run = self.batched.run(group, round, size, references, private)
        device = self.ctx.device
        totals = torch.zeros(len(group), dtype=torch.float64, device=device)
        terms: dict[str, torch.Tensor] = {}
        diverging = self.diverging(group)
        for s in range(max(steps)):
            n = sum(1 for k in steps if k > s)
            loss, step_terms = self.local_loss(run.batch(n))
            loss = loss.reshape(n)
            if diverging is not None:
                loss = loss * loss.new_tensor(diverging[:n])
            run.step(loss, n)
            totals[:n] += loss.detach().double()
            if self.step_losses is not None:
                for peer, value in zip(group, loss.detach().tolist()):
                    self.step_losses.setdefault(peer.id, []).append(value)
            for k, v in step_terms.items():
                if k not in terms:  # allocated once a round, not every step
                    terms[k] = torch.zeros(len(group), dtype=v.dtype, device=device)
                terms[k][:n] += v.detach().reshape(n)
        finite = run.finish()
        totals_, terms_ = totals.tolist(), {k: v.tolist() for k, v in terms.items()}
        for i, peer in enumerate(group):  # the guard first: the hook records only accepted updates
            metrics = {"loss": totals_[i] / steps[i], **{k: v[i] / steps[i] for k, v in terms_.items()}}
            if self.dp is not None:  # the round's steps spent, rolled back or not
                metrics[DP_EPSILON] = self.dp.account(peer, steps[i])
            if math.isfinite(metrics["loss"]) and finite[i]:
                self.after_local(peer, round, steps[i])
            else:
                if self.cfg.on_nonfinite == "abort":
                    raise RuntimeError(f"peer {peer.id}'s update turned non-finite in round {round} "
                                       "(--on-nonfinite abort)")
                run.roll_back(i)
                peer.optimizer.state.clear()
                out.rolled_back.append(peer.id)
            out.metrics[peer.id] = metrics


class OnePeer(LocalRun):
    """A peer's local round alone: its own model and optimiser, a step at a time."""

    def __init__(self, trainer: LocalTrainer, peer: Peer, round: int, size: int,
                 references: list[nn.Module], private: DPStep | None = None) -> None:
        self.trainer, self.peer, self.size, self.refs, self.private = trainer, peer, size, references, private
        self.before = state_copy(peer.model)  # what the peer returns to when its update turns non-finite
        self.opt = trainer.for_round(peer.optimizer, round)

    def batch(self, n: int) -> PeerBatch:
        return OneBatch(self.peer, *self.peer.data.next_batch(self.size), self.refs, self.private)

    def step(self, loss: torch.Tensor, n: int) -> None:
        self.opt.zero_grad(set_to_none=True)
        loss.sum().backward()
        self.trainer.after_backward(self.peer)
        self.opt.step()

    def finish(self) -> list[bool]:
        state = [v for v in self.peer.model.state_dict().values() if v.is_floating_point()]
        return [all(bool(torch.isfinite(v).all()) for v in state)]

    def roll_back(self, i: int) -> None:
        self.peer.model.load_state_dict(self.before)


class OneBatch(PeerBatch):
    """A step's batch of one peer: its uint8 images `x` and targets `y`, and its reference models; with `private`
    (DP-SGD) its loss carries the privatised gradient."""

    def __init__(self, peer: Peer, x: torch.Tensor, y: torch.Tensor, references: list[nn.Module],
                 private: DPStep | None = None) -> None:
        self.peer, self.peers, self.x, self.y, self.refs, self.private = peer, [peer], x, y, references, private

    def augment(self, draw: Callable[[Peer, torch.Tensor], Any], apply: Callable[[torch.Tensor, Any], torch.Tensor]
                ) -> torch.Tensor:
        return apply(self.x, draw(self.peer, self.x))

    def model_loss(self, inputs: torch.Tensor, criterion: Criterion, penalty: Penalty | None = None) -> StepLoss:
        peer = self.peer
        out = peer.model(inputs) if self.private is None else None
        with torch.no_grad():
            refs = [ref(inputs) for ref in self.refs]
        if self.private is None:
            loss, terms = criterion(out, self.y, refs)
        else:
            loss, terms = one_peer_loss(self.private, peer.model, inputs, self.y, refs, criterion)
        if penalty is not None:  # its records keep `start`, the parameters the peer started the round with
            extra = penalty([p.unsqueeze(0) for p in trainable(peer.model)], [p.unsqueeze(0) for p in peer.start])
            loss = loss + extra[0]
        return loss, terms

    def alone(self) -> tuple[Peer, torch.Tensor, torch.Tensor]:
        return self.peer, self.x, self.y
