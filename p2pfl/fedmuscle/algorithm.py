"""FedMuscle, decentralised (SPEC §6, seed 000): heterogeneous peers align their representations on a public set.

Every peer keeps its own model and task (``--peers-spec``, see :mod:`p2pfl.fedmuscle.peerspec`) and never sends a
weight. A round of an active peer:

1. local training on its own task (E epochs or ``--local-steps``; the whole model, or its LoRA adapters and
   heads), with the shared machinery of :class:`~p2pfl.algorithms.trainer.LocalTrainer`;
2. T = ``--contrastive-steps`` alignment steps. In step s of round t every peer draws the same public batch,
   ``numpy_rng(seed, SHARED, f"public/{t}/{s}").choice(P, B, replace=False)`` over the P public images,
   computes Z = normalise(h(x_pub)) (B x d, d = ``--rep-dim``) with its representation model h (encoder +
   linear projection to d), sends Z to its active neighbours (exchange kind "reps"), samples M = ``--muscle-m``
   of the neighbours it heard from with ``numpy_rng(seed, peer, f"muscle-sample/{t}/{s}")`` (all of them when
   it has M or fewer), and takes one optimiser step on ``--loss`` (muscle | pairwise | gram) with its own
   fresh Z (with gradient) as the anchor and the received matrices as constants. Only the representation
   model's trainable parameters are in that optimiser: task heads never move in this phase.

Data (task shards, test sets, the public set in each peer's input format) come from
:func:`p2pfl.fedmuscle.multitask.load_multitask_workload`; tasks from :mod:`p2pfl.fedmuscle.tasks`; the alignment losses
from the registry in :mod:`p2pfl.losses.align`.
Every peer with the same architecture starts from the same weights (stream (seed, SHARED, "init") for the
encoder and head, "init/projection" for the projection), as in the other methods.

Metrics: each evaluation gives every peer its ``task_metric`` (accuracy; mAP for multi-label, plus ``f1``
(macro) and ``f1_micro``), ``task_metric_name``, and ``muscle_loss``, the alignment loss (of the chosen
``--loss``) of its last contrastive step; the round records carry ``loss`` (task) and ``muscle_loss`` (the last
step of that round) per peer. ``public_digest`` / ``sample_digest`` (hex crc32 of every public index and every
sampled neighbour set the peer used) let tests check that batches and samples do not depend on placement.

``--contrastive-steps 0`` is exactly local training; ``--algorithm local --peers-spec F`` runs that.
"""
from __future__ import annotations

import os
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from p2pfl.algorithms.local_batch import PeerBatch, StepLoss
from p2pfl.algorithms.peer import Peer, derived
from p2pfl.algorithms.trainer import LocalTrainer
from p2pfl.capabilities import FEATURES, SEQUENCE_LABELS, TOKENS
from p2pfl.context import RunContext
from p2pfl.data import PeerData, normalize, supervised_augment
from p2pfl.evaluation import features, multilabel_scores
from p2pfl.fedmuscle.multitask import MultiTaskWorkload, PeerTask, load_multitask_workload
from p2pfl.fedmuscle.peerspec import PeersSpec, uniform_spec
from p2pfl.fedmuscle.records import TASK_METRIC, TASK_METRIC_NAME, MuscleSummary
from p2pfl.losses.align import GRAM_LABEL_SMOOTHING, align_loss, align_temperatures, anchor_gradient_cosine
from p2pfl.method import Phase
from p2pfl.models import RepresentationNet, SupervisedNet, build_encoder, count_parameters, init_model
from p2pfl.models.encoders import takes
from p2pfl.models.pretrained import load_into
from p2pfl.network import RoundNetwork
from p2pfl.options import Check, method_options, opt, owned
from p2pfl.runtime.progress import format_bytes
from p2pfl.seeding import SHARED, numpy_rng, torch_generator

FLOAT_BYTES = 4


# ------------------------------------------------------------------------------------------------ pure helpers

def public_batch_indices(seed: int, round: int, step: int, n_public: int, batch: int) -> np.ndarray:
    """The public batch of contrastive step ``step`` (0-based) in ``round``: the same for every peer and layout."""
    if batch > n_public:
        raise ValueError(f"--public-batch {batch} exceeds the {n_public} public images")
    return numpy_rng(seed, SHARED, f"public/{round}/{step}").choice(n_public, size=batch, replace=False)


def sample_neighbours(seed: int, peer: int, round: int, step: int, neighbours: Sequence[int], m: int) -> list[int]:
    """M of ``neighbours`` (ascending), drawn from the peer's own stream for (round, step); all of them when
    there are M or fewer. Depends on nothing else, so not on where peers are placed."""
    nbrs = sorted(int(q) for q in neighbours)
    if len(nbrs) <= m:
        return nbrs
    pick = numpy_rng(seed, peer, f"muscle-sample/{round}/{step}").choice(len(nbrs), size=m, replace=False)
    return sorted(nbrs[int(i)] for i in pick)


def server_bytes_per_round(n_active: int, steps: int, batch: int, rep_dim: int, m: int) -> dict[str, float]:
    """What the paper's server design moves per round for the same B, d, M (float32): every active peer
    uploads Z (B x d) per step; the server sends back S^n, the B^M x d sums Σ_m z^m_{j_m} over every index
    tuple j of the M sampled peers, and alpha^n (B^M weights): B^M (d + 1) numbers per peer per step."""
    up = steps * batch * rep_dim * FLOAT_BYTES
    down = steps * batch ** m * (rep_dim + 1) * FLOAT_BYTES
    return {"uplink_bytes_per_peer": float(up), "downlink_bytes_per_peer": float(down),
            "bytes_per_round": float(n_active * (up + down))}


# ------------------------------------------------------------------------------------------------ the method

@dataclass(eq=False)
class MusclePeer(Peer):
    """A FedMuscle peer: its task (derived from the spec), the optimiser of its representation model, the
    alignment loss of its last contrastive step, and the digests of the public batches and samples it used."""

    model: RepresentationNet
    task: PeerTask = derived()
    rep_optimizer: torch.optim.Optimizer = None
    last_align: float | None = None
    public_digest: int = 0
    sample_digest: int = 0


@method_options("fedmuscle")
class FedMuscleOptions:
    """FedMuscle's alignment on the public set, and the heterogeneous peers (--peers-spec)."""

    muscle_m: int = opt(3, "neighbours M sampled per contrastive step", section="fedmuscle", bounds=">= 1")
    contrastive_steps: int = opt(1, "contrastive steps T per round", section="fedmuscle", bounds=">= 0")
    public_size: int = opt(5000, "images held out as the public set", section="fedmuscle")
    public_batch: int = opt(32, "public batch B", section="fedmuscle", bounds=">= 2")
    rep_dim: int = opt(256, "representation width d", section="fedmuscle", bounds=">= 1")
    loss: str = opt("muscle", "alignment loss", owned("p2pfl.losses.align", "ALIGN_LOSSES"), section="fedmuscle")
    align_tau: float | None = opt(None, "temperature of the alignment loss (default: each loss's reference value, "
                                  "muscle and pairwise 0.2, gram 0.07); one value for all losses matches them",
                                  section="fedmuscle", bounds="> 0")
    muscle_tau_prev: float | None = opt(None, "Muscle's tau^(N-1) (default 0.75 x the temperature: 0.15 at 0.2); "
                                        "equal to the temperature gives gamma = 0, the pairwise loss",
                                        section="fedmuscle")
    peers_spec: str | None = opt(None, "YAML file giving each peer its model, task and dataset", section="fedmuscle")
    lora_rank: int = opt(16, "LoRA rank for Hugging Face models (0: full fine-tuning)", section="fedmuscle",
                         bounds=">= 0")

    def validate(self, check: Check) -> None:
        if self.muscle_tau_prev is not None:
            tau = align_temperatures("muscle", self.align_tau, None)["tau"]
            check(0 < self.muscle_tau_prev <= tau, "muscle_tau_prev",
                  f"must lie in (0, {tau:g}] (the loss's temperature; gamma = 1/tau_prev - 1/tau >= 0), "
                  f"got {self.muscle_tau_prev}")
        if self.peers_spec is not None:
            check(os.path.isfile(self.peers_spec), "peers_spec", f"file not found: {self.peers_spec}")


class FedMuscle(LocalTrainer):
    """Heterogeneous peers: local task training, then T representation-alignment steps on the public set."""

    name = "fedmuscle"
    record: ClassVar[type[Peer]] = MusclePeer
    lacks = {FEATURES: "its public data and its peers' tasks are images",
             TOKENS: "its public data and its peers' tasks are images",
             SEQUENCE_LABELS: "its public data and its peers' tasks are images"}
    peers: dict[int, MusclePeer]

    ignores: ClassVar[dict[str, str]] = {
        "peer_scores": "fedmuscle scores every peer's own model at every evaluation already"}

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.work: MultiTaskWorkload | None = None

    # ------------------------------------------------------------------ set-up
    @classmethod
    def trained_alone(cls) -> type[FedMuscle]:
        """The same peers with no alignment phase: what `local --peers-spec` runs."""
        return FedMuscleLocal

    def load_spec(self) -> PeersSpec:
        """The run's --peers-spec (read once, when the run was resolved), else every peer on --model/--dataset."""
        cfg = self.cfg
        if cfg.peers_spec is None:  # --lora-rank reaches a model that takes it in `build_model`
            return uniform_spec(self.ctx.n_peers, cfg.model, cfg.dataset, cfg.public_size)
        assert self.ctx.spec is not None, "a run with --peers-spec carries its spec (p2pfl.config.resolve)"
        return self.ctx.spec

    def load_data(self) -> None:
        self.work = load_multitask_workload(self.load_spec(), self.cfg, self.ctx.world, self.ctx.local_peers,
                                            self.ctx.device)

    def shard(self, peer: int) -> PeerData:
        assert self.work is not None
        return self.work.tasks[peer].data

    def build_model(self, peer: int) -> RepresentationNet:
        """Encoder + task head initialised as a SupervisedNet from (seed, SHARED, "init"), so a one-group run
        starts exactly where the supervised methods start; the projection from "init/projection". A group's
        `init:` checkpoint (python -m p2pfl.pretrain) then replaces the encoder's weights."""
        assert self.work is not None
        task = self.work.tasks[peer]
        opts = dict(task.entry.model_options)
        if takes(task.entry.model, "lora_rank"):  # hf:PATH's adapters
            opts.setdefault("lora_rank", self.cfg.lora_rank)
        encoder = build_encoder(task.entry.model, task.channels, task.image_size, **opts)
        sup = SupervisedNet(encoder, task.outputs)
        init_model(sup, torch_generator(self.cfg.seed, SHARED, "init"))
        if task.entry.init is not None:
            load_into(encoder, task.entry.init, task.entry.model, task.channels, task.image_size)
        net = RepresentationNet(encoder, self.cfg.rep_dim, sup.classifier)
        init_model(net.projection, torch_generator(self.cfg.seed, SHARED, "init/projection"))
        return net.to(self.ctx.device)

    def init_peer(self, peer: MusclePeer) -> None:
        assert self.work is not None
        peer.task = self.work.tasks[peer.id]
        peer.rep_optimizer = self.make_optimizer(list(peer.model.representation_parameters(trainable_only=True)))

    def setup(self) -> None:
        super().setup()
        assert self.work is not None
        described: dict[int, dict] = {}
        for peer in self.peers.values():
            e, model = peer.task.entry, peer.model
            if e.group not in described:
                described[e.group] = {"group": e.group, "model": e.model, "task": e.task, "dataset": e.dataset_key,
                                      "parameters": count_parameters(model),
                                      "trainable": count_parameters(model, trainable_only=True),
                                      "representation_trainable": sum(
                                          t.numel() for t in model.representation_parameters(trainable_only=True)),
                                      "outputs": peer.task.outputs, "input": list(peer.task.geometry)}
        merged: dict[int, dict] = {}
        for part in self.ctx.world.allgather(described):
            merged.update(part)
        cfg = self.cfg
        self.ctx.record_manifest(
            **self.work.manifest, models=[merged[g] for g in sorted(merged)],
            alignment={"loss": cfg.loss, "muscle_m": cfg.muscle_m, "contrastive_steps": cfg.contrastive_steps,
                       **align_temperatures("muscle", cfg.align_tau, cfg.muscle_tau_prev),
                       "gram_tau": align_temperatures("gram", cfg.align_tau)["tau"],
                       "gram_label_smoothing": GRAM_LABEL_SMOOTHING, "matched": cfg.align_tau is not None})

    # ------------------------------------------------------------------ local training
    def local_loss(self, batch: PeerBatch) -> StepLoss:
        peer, x, y = batch.alone()
        task = peer.task
        out = peer.model(supervised_augment(x, peer.augment_rng, task.mean, task.std, flip_p=task.transform.flip_p,
                                            fill=task.transform.fill))
        if peer.task.entry.multilabel:
            return F.binary_cross_entropy_with_logits(out, y), {}
        return F.cross_entropy(out, y), {}

    # ------------------------------------------------------------------ alignment
    def represent(self, peer: MusclePeer, idx: torch.Tensor) -> torch.Tensor:
        """normalise(h(x_pub)) of the public images ``idx`` in the peer's input format, with gradient."""
        assert self.work is not None
        x = normalize(self.work.public[peer.task.geometry][idx], peer.task.mean, peer.task.std)
        peer.model.train()
        return F.normalize(peer.model.represent(x).to(torch.get_default_dtype()), dim=1)

    def communicate(self, round: int, net: RoundNetwork) -> Phase | None:
        cfg = self.cfg
        if not self.communicates or cfg.contrastive_steps == 0:
            return None
        assert self.work is not None
        local = [peer for p, peer in self.peers.items() if p in net.active]
        opts = {peer.id: self.for_round(peer.rep_optimizer, round) for peer in local}
        used: dict[int, list[int]] = {}  # per peer, the M of each step
        cosines: dict[int, list[float]] = {}  # per peer, cos(∇ loss, ∇ pairwise) at the anchor, each step
        exchanges = self.ctx.gossip.exchanges(None, round)  # each step reads its own receivers' verdicts: one
        for step in range(cfg.contrastive_steps):  # agreement a round, at the end
            idx_np = public_batch_indices(cfg.seed, round, step, self.work.n_public, cfg.public_batch)
            idx = torch.as_tensor(idx_np, device=self.ctx.device)
            reps = {peer.id: self.represent(peer, idx) for peer in local}
            payloads = {p: z.detach().contiguous() for p, z in reps.items()}
            delivered = exchanges.start(payloads, net.incoming).local()
            inbox = delivered.inbox
            idx_bytes = idx_np.astype(np.int64).tobytes()
            for peer in local:
                p = peer.id
                peer.public_digest = zlib.crc32(idx_bytes, peer.public_digest)
                heard = [q for q in inbox[p] if (p, q) not in delivered.rejected]
                chosen = sample_neighbours(cfg.seed, p, round, step, heard, cfg.muscle_m)
                peer.sample_digest = zlib.crc32(np.asarray([-1, *chosen], dtype=np.int64).tobytes(),
                                                peer.sample_digest)
                if not chosen:
                    continue
                others = torch.stack([inbox[p][q].to(reps[p].device) for q in chosen])
                used.setdefault(p, []).append(len(chosen))
                loss = align_loss(cfg.loss, reps[p], others, cfg.align_tau, cfg.muscle_tau_prev)
                if cfg.loss != "pairwise":  # the loss's own anchor gradient from the training graph, not a re-run
                    (anchor_grad,) = torch.autograd.grad(loss, reps[p], retain_graph=True)
                    cosines.setdefault(p, []).append(anchor_gradient_cosine(
                        reps[p], others, cfg.loss, "pairwise", cfg.align_tau, cfg.muscle_tau_prev, anchor_grad))
                opts[p].zero_grad(set_to_none=True)
                loss.backward()
                opts[p].step()
                peer.last_align = float(loss.detach())
            delivered.release()  # the step stacked what it used
            del reps, payloads, inbox, delivered
        aligned: dict[int, dict[str, float]] = {}
        for p, ms in used.items():
            aligned[p] = {"muscle_loss": self.peers[p].last_align, "muscle_m": sum(ms) / len(ms)}
            if p in cosines:
                aligned[p]["grad_cos_pairwise"] = sum(cosines[p]) / len(cosines[p])
        return Phase(aligned, exchanges.close())

    # ------------------------------------------------------------------ evaluation
    def score_peer(self, peer: MusclePeer) -> dict[str, Any]:
        """The peer's task metric on its task's test set (and F1 for multi-label)."""
        peer.model.eval()
        x, y = peer.task.test
        logits = features(peer.model, x, peer.task.mean, peer.task.std, self.ctx.device)
        if peer.task.entry.multilabel:
            s = multilabel_scores(logits, y)
            out: dict[str, Any] = {TASK_METRIC: s["mAP"], TASK_METRIC_NAME: "mAP", "mAP": s["mAP"],
                                   "f1": s["f1"], "f1_micro": s["f1_micro"]}
        else:
            acc = float((logits.argmax(1).cpu() == y.cpu()).float().mean())
            out = {TASK_METRIC: acc, TASK_METRIC_NAME: "accuracy", "accuracy": acc}
        if peer.last_align is not None:
            out["muscle_loss"] = peer.last_align
        if self.communicates and self.cfg.contrastive_steps > 0:
            out["public_digest"] = f"{peer.public_digest:08x}"
            out["sample_digest"] = f"{peer.sample_digest:08x}"
        return out

    def evaluate(self, round: int, final: bool, net: RoundNetwork
                 ) -> tuple[dict[str, float], dict[int, dict[str, Any]]]:
        per_peer = {p: self.score_peer(self.peers[p]) for p in self.alive_peers(net)}
        mine = {p: (self.peers[p].task.entry.task, m[TASK_METRIC]) for p, m in per_peer.items()}
        world = self.ctx.world
        parts = world.gather(mine)
        metrics: dict[str, float] = {}
        if parts is not None:
            by_task: dict[str, list[float]] = {}
            for part in parts:
                for task, value in part.values():
                    by_task.setdefault(task, []).append(value)
            for task, values in sorted(by_task.items()):
                metrics[f"task_metric/{task}"] = sum(values) / len(values)
        return metrics, per_peer

    def summary(self) -> dict[str, Any]:
        cfg, ctx = self.cfg, self.ctx
        stats = ctx.transport.stats
        mine = {p: int(stats.peer_sent.get(p, 0)) for p in ctx.local_peers}
        parts = ctx.world.gather(mine)
        if parts is None:
            return {}
        sent: dict[int, int] = {}
        for part in parts:
            sent.update(part)
        rounds = max(1, cfg.rounds)
        steps = cfg.contrastive_steps if self.communicates else 0
        links = [ctx.schedule.at(t).links for t in range(1, cfg.rounds + 1)] or [0]
        m_server = min(cfg.muscle_m, ctx.n_peers - 1)
        server = server_bytes_per_round(ctx.n_peers, steps, cfg.public_batch, cfg.rep_dim, m_server)
        return {"communication": {
            "bytes_sent_per_peer_round": sum(sent.values()) / (len(sent) * rounds),
            "bytes_sent_per_peer_round_by_peer": {str(p): v / rounds for p, v in sorted(sent.items())},
            "p2p_formula": "each active peer sends T*deg*B*d*4 bytes a round (its B x d float32 Z to each "
                           "neighbour it has that round, every contrastive step) and receives as much; averaged "
                           "over peers and rounds that is T*(links per round / K)*B*d*4",
            "p2p_bytes_per_peer_round_expected": steps * (sum(links) / len(links) / ctx.n_peers) * cfg.public_batch
                                                  * cfg.rep_dim * FLOAT_BYTES,
            "server_formula": "paper's server design, full participation, float32: per peer and step the "
                              "uplink is B*d and the downlink B^M*(d+1) (S^n: B^M x d aggregated sums, alpha^n: "
                              "B^M weights); per round T*K*(B*d + B^M*(d+1))*4 bytes, M = min(muscle_m, K-1)",
            "server_M": m_server,
            "server_uplink_bytes_per_peer_round": server["uplink_bytes_per_peer"],
            "server_downlink_bytes_per_peer_round": server["downlink_bytes_per_peer"],
            "server_bytes_per_round": server["bytes_per_round"],
        }}

    def summary_lines(self, summary: MuscleSummary) -> list[str]:
        """Bytes per peer and round sent peer to peer, next to what the paper's server design would send."""
        comm = summary["communication"]
        return [f"bytes per peer and round: {format_bytes(comm['bytes_sent_per_peer_round'])} sent peer to peer; "
                f"the paper's server design would send {format_bytes(comm['server_downlink_bytes_per_peer_round'])}"
                f" down and {format_bytes(comm['server_uplink_bytes_per_peer_round'])} up"]


class FedMuscleLocal(FedMuscle):
    """The same heterogeneous peers trained alone: FedMuscle with no alignment phase (the Δ% baseline)."""

    name = "local"
    communicates = False
