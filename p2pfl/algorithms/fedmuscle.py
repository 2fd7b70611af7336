"""FedMuscle, decentralised (SPEC §6, seed 000): heterogeneous peers align their representations on a public set.

Every peer keeps its own model and task (``--peers-spec``, see :mod:`p2pfl.peerspec`) and never sends a weight.
A round of an active peer:

1. local training on its own task (E epochs or ``--local-steps``; the whole model, or its LoRA adapters and
   heads), with the shared machinery of :class:`~p2pfl.algorithms.learner.Learner`;
2. T = ``--contrastive-steps`` alignment steps. In step s of round t every peer draws the same public batch,
   ``numpy_rng(seed, SHARED, f"public/{t}/{s}").choice(P, B, replace=False)`` over the P public images,
   computes Z = normalise(h(x_pub)) (B x d, d = ``--rep-dim``) with its representation model h (encoder +
   linear projection to d), sends Z to its active neighbours (exchange kind "reps"), samples M = ``--muscle-m``
   of the neighbours it heard from with ``numpy_rng(seed, peer, f"muscle-sample/{t}/{s}")`` (all of them when
   it has M or fewer), and takes one optimiser step on ``--loss`` (muscle | pairwise | gram) with its own
   fresh Z (with gradient) as the anchor and the received matrices as constants. Only the representation
   model's trainable parameters are in that optimiser: task heads never move in this phase.

Inputs: each peer sees every image, the public ones included, in its own input format. Public images (uint8,
from the public dataset) are converted once per geometry: RGB -> gray with torchvision's luma weights
(0.2989, 0.587, 0.114) for 1-channel peers (gray -> RGB by repetition the other way), then resized with
antialiased bilinear interpolation to the peer's image size (32 -> 28 for Fashion-MNIST), rounded back to
uint8; the peer then normalises them with its own dataset's mean/std, exactly like its private images.
Hugging Face encoders resize further to their checkpoint's size themselves.

Data: the public set is ``split_public`` of the public dataset's training images (``--public-size``, or the
spec's ``public.size``); peers reading that dataset train on the rest. A task group is the peers with the same
(dataset, task, label set), whatever their models. Task groups reading the same dataset split its private pool
in proportion to their sizes (a seeded shuffle, ``(seed, SHARED, "group-split/<dataset>")``), a label set keeps
only those classes, and ``--partition`` (Dirichlet ``--alpha`` by default) splits each task group's pool over
its peers. ``--train-subset N`` keeps N images of each private pool, a seeded random subset
(``(seed, SHARED, "train-subset/<dataset>")``; not the first N, since the shared CIFAR-10 archive is sorted by
class). Task group 0 partitions with
``--seed`` itself (so a one-group run splits exactly like the other algorithms), task group g >= 1 with a seed
derived from (seed, g), so that the groups' draws are independent. Every peer of a task group is evaluated on
the same test set (the dataset's test split in the task's form; the spec's ``test_subset`` keeps a seeded random
N of it, ``(seed, SHARED, "test-subset/<dataset>")``).
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

import math
import zlib
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from p2pfl.algorithms.learner import Learner
from p2pfl.data import (random_subset, PeerData, class_counts, ensure_dataset, load_dataset, make_mosaic, normalize, partition,
                        split_public, supervised_augment)
from p2pfl.data.tasks import coarse_labels
from p2pfl.evaluation import features
from p2pfl.losses import GRAM_DEFAULT_TAU, GRAM_LABEL_SMOOTHING, MUSCLE_TAU, MUSCLE_TAU_PREV, align_loss
from p2pfl.models import RepresentationNet, SupervisedNet, build_encoder, count_parameters, init_model
from p2pfl.peerspec import CLASSIFICATION_TASKS, PeerEntry, PeersSpec, dataset_key, uniform_spec
from p2pfl.rounds import RunContext
from p2pfl.seeding import SHARED, numpy_rng, stream_seed, torch_generator

GRAY_WEIGHTS = (0.2989, 0.587, 0.114)
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


def to_geometry(x: torch.Tensor, channels: int, size: int) -> torch.Tensor:
    """uint8 images N×C×H×W in another input format: RGB -> gray (luma weights) or gray -> RGB (repeat), then
    antialiased bilinear resize to size×size, rounded back to uint8. Unchanged when the format already fits."""
    c, h = int(x.shape[1]), int(x.shape[2])
    if c == channels and h == size and int(x.shape[3]) == size:
        return x
    xf = x.float()
    if c == 3 and channels == 1:
        w = torch.tensor(GRAY_WEIGHTS, dtype=xf.dtype, device=xf.device).view(1, 3, 1, 1)
        xf = (xf * w).sum(dim=1, keepdim=True)
    elif c == 1 and channels == 3:
        xf = xf.expand(-1, 3, -1, -1)
    elif c != channels:
        raise ValueError(f"cannot convert {c}-channel public images to {channels} channels")
    if (h, int(x.shape[3])) != (size, size):
        xf = F.interpolate(xf, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
    return xf.round_().clamp_(0, 255).to(torch.uint8).contiguous()


def multilabel_scores(logits: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
    """mAP (mean over classes with a positive of the average precision, ties in score order of appearance),
    macro F1 over the same classes and micro F1, predicting a label when its logit is > 0."""
    scores, t = logits.float().cpu(), targets.float().cpu() > 0.5
    n, c = scores.shape
    present = t.any(dim=0)
    order = torch.argsort(scores, dim=0, descending=True, stable=True)
    hits = torch.gather(t, 0, order).float()
    precision = hits.cumsum(0) / torch.arange(1, n + 1, dtype=torch.float32).unsqueeze(1)
    ap = (precision * hits).sum(0) / hits.sum(0).clamp_min(1)
    pred = scores > 0
    tp = (pred & t).sum(0).float()
    fp = (pred & ~t).sum(0).float()
    fn = (~pred & t).sum(0).float()
    f1 = 2 * tp / (2 * tp + fp + fn).clamp_min(1)
    denom = float(2 * tp.sum() + fp.sum() + fn.sum())
    if not bool(present.any()):
        return {"mAP": math.nan, "f1": math.nan, "f1_micro": math.nan}
    return {"mAP": float(ap[present].mean()), "f1": float(f1[present].mean()),
            "f1_micro": float(2 * tp.sum()) / denom if denom else math.nan}


def server_bytes_per_round(n_active: int, steps: int, batch: int, rep_dim: int, m: int) -> dict[str, float]:
    """What the paper's server design moves per round for the same B, d, M (float32): every active peer
    uploads Z (B x d) per step; the server sends back S^n, the B^M x d sums Σ_m z^m_{j_m} over every index
    tuple j of the M sampled peers, and alpha^n (B^M weights): B^M (d + 1) numbers per peer per step."""
    up = steps * batch * rep_dim * FLOAT_BYTES
    down = steps * batch ** m * (rep_dim + 1) * FLOAT_BYTES
    return {"uplink_bytes_per_peer": float(up), "downlink_bytes_per_peer": float(down),
            "bytes_per_round": float(n_active * (up + down))}


# ------------------------------------------------------------------------------------------------ tasks

def _reindex(y: torch.Tensor, labels: tuple[int, ...] | None) -> torch.Tensor:
    if labels is None:
        return y
    lut = torch.full((int(max(labels)) + 1,), -1, dtype=torch.int64, device=y.device)
    lut[list(labels)] = torch.arange(len(labels), device=y.device)
    return lut[y.long()]


def task_outputs(entry: PeerEntry, num_classes: int) -> int:
    """Logits the peer's head produces."""
    if entry.task == "cifar10-coarse":
        return 2
    return len(entry.labels) if entry.labels is not None else num_classes


def make_task(entry: PeerEntry, x: torch.Tensor, y: torch.Tensor, num_classes: int, seed: int, peer: int,
              purpose: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Images and dataset labels (already restricted to the label set) -> the task's inputs and targets.
    Mosaics draw their sources from ``numpy_rng(seed, peer, "mosaic-" + purpose)``."""
    if entry.task in CLASSIFICATION_TASKS:
        return x, _reindex(y, entry.labels)
    if entry.task == "cifar10-coarse":
        return x, coarse_labels(y)
    n_out = task_outputs(entry, num_classes)
    return make_mosaic(x, _reindex(y, entry.labels), x.shape[0], seed, peer, "mosaic-" + purpose, num_classes=n_out)


def _keep_labels(y: torch.Tensor | np.ndarray, labels: tuple[int, ...] | None) -> np.ndarray:
    yy = y.numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
    if labels is None:
        return np.ones(yy.shape[0], dtype=bool)
    return np.isin(yy, np.asarray(labels))


# ------------------------------------------------------------------------------------------------ the method

class FedMuscle(Learner):
    """Heterogeneous peers: local task training, then T representation-alignment steps on the public set."""

    name = "fedmuscle"

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.spec: PeersSpec | None = None
        self.entries: dict[int, PeerEntry] = {}
        self.norm: dict[int, tuple[tuple[float, ...], tuple[float, ...]]] = {}
        self.public: dict[tuple[int, int], torch.Tensor] = {}
        self.geometry: dict[int, tuple[int, int]] = {}
        self.tests: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.rep_optimizers: dict[int, torch.optim.Optimizer] = {}
        self.last_align: dict[int, float] = {}
        self.public_digest: dict[int, int] = {}
        self.sample_digest: dict[int, int] = {}
        self.n_public = 0
        self.parts: dict[int, np.ndarray] = {}

    # ------------------------------------------------------------------ set-up
    def load_spec(self) -> PeersSpec:
        """The run's --peers-spec (read once, when the run was resolved), else every peer on --model/--dataset."""
        cfg = self.cfg
        if cfg.peers_spec is None:
            opts = {"lora_rank": cfg.lora_rank} if cfg.model.startswith("hf:") else {}
            return uniform_spec(self.ctx.n_peers, cfg.model, cfg.dataset, cfg.public_size, opts)
        assert self.ctx.spec is not None, "a run with --peers-spec carries its spec (p2pfl.config.resolve)"
        return self.ctx.spec

    def _load(self, name: str, options: dict, cache: dict):
        key = dataset_key(name, options)
        if key not in cache:
            cache[key] = load_dataset(name, self.cfg.data_dir, **options)
        return cache[key]

    def setup(self) -> None:
        cfg, ctx = self.cfg, self.ctx
        device = ctx.device
        spec = self.spec = self.load_spec()
        self.entries = {e.peer: e for e in spec.peers}
        if cfg.download:
            names = sorted(({e.dataset for e in spec.peers} | {spec.public_dataset}) - {"synthetic"})
            for name in names:
                ensure_dataset(name, cfg.data_dir, allow_download=True, barrier=ctx.world.barrier,
                               is_node_leader=ctx.world.local_rank == 0)
        datasets: dict[str, Any] = {}
        public_ds = self._load(spec.public_dataset, spec.public_options, datasets)
        private_idx, public_idx = split_public(int(public_ds.x_train.shape[0]), spec.public_size, cfg.seed)
        self.n_public = int(public_idx.size)
        if cfg.public_batch > self.n_public:
            raise ValueError(f"--public-batch: {cfg.public_batch} exceeds the {self.n_public} public images")
        public_x = public_ds.x_train[torch.as_tensor(public_idx)]

        # private pools: per dataset, the images not held out, capped by --train-subset, split among groups
        groups = spec.task_groups()
        group_of = {e.peer: g for g, members in enumerate(groups) for e in members}
        by_key: dict[str, list[int]] = {}
        for g, members in enumerate(groups):
            by_key.setdefault(members[0].dataset_key, []).append(g)
        group_pool: dict[int, np.ndarray] = {}
        for key, gs in by_key.items():
            first = groups[gs[0]][0]
            ds = self._load(first.dataset, first.dataset_options, datasets)
            n = int(ds.x_train.shape[0])
            pool = private_idx if key == spec.public_key else np.arange(n, dtype=np.int64)
            if cfg.train_subset is not None:
                pool = random_subset(pool, cfg.train_subset, cfg.seed, f"train-subset/{key}")
            if len(gs) == 1:
                group_pool[gs[0]] = pool
                continue
            sizes = np.array([len(groups[g]) for g in gs], dtype=np.float64)
            cuts = np.floor(np.cumsum(sizes) / sizes.sum() * pool.size).astype(np.int64)
            shuffled = pool[numpy_rng(cfg.seed, SHARED, f"group-split/{key}").permutation(pool.size)]
            for g, lo, hi in zip(gs, np.concatenate([[0], cuts[:-1]]), cuts):
                group_pool[g] = np.sort(shuffled[lo:hi])

        # Dirichlet (or --partition) inside each task group, over the dataset's classes
        parts: dict[int, np.ndarray] = {}
        counts: dict[int, list[int]] = {}
        for g, members in enumerate(groups):
            e0 = members[0]
            ds = self._load(e0.dataset, e0.dataset_options, datasets)
            pool = group_pool[g]
            pool = pool[_keep_labels(ds.y_train[torch.as_tensor(pool)], e0.labels)]
            labels = ds.y_train[torch.as_tensor(pool)].numpy()
            seed = cfg.seed if g == 0 else stream_seed(cfg.seed, SHARED, f"partition/group{g}")
            try:
                split = partition(labels, len(members), cfg.partition, seed, alpha=cfg.alpha, beta=cfg.beta,
                                  min_size=cfg.min_size, num_classes=ds.num_classes)
            except ValueError as exc:
                raise ValueError(f"--peers-spec: task group {g} ({e0.task} on {e0.dataset_key}, {len(members)} "
                                 f"peers, {pool.size} images): {exc}") from None
            cc = class_counts(split, labels, ds.num_classes)
            for k, e in enumerate(members):
                parts[e.peer] = pool[split[k]]
                counts[e.peer] = [int(v) for v in cc[k]]

        self.parts = parts
        # this rank's peers: shards, test sets, public images in their format, models
        test_cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        described: dict[int, dict] = {}
        for p in ctx.local_peers:
            e = self.entries[p]
            ds = self._load(e.dataset, e.dataset_options, datasets)
            idx = torch.as_tensor(parts[p])
            x, y = make_task(e, ds.x_train[idx], ds.y_train[idx], ds.num_classes, cfg.seed, p, "train")
            self.data[p] = PeerData(x, y, peer=p, seed=cfg.seed, device=device)
            g = group_of[p]
            if g not in test_cache:
                keep = np.flatnonzero(_keep_labels(ds.y_test, e.labels))
                if spec.test_subset is not None:
                    keep = random_subset(keep, spec.test_subset, cfg.seed, f"test-subset/{e.dataset_key}")
                keep = torch.as_tensor(keep)
                xt, yt = ds.x_test[keep], ds.y_test[keep]
                xt, yt = make_task(e, xt, yt, ds.num_classes, cfg.seed, SHARED, "test")
                test_cache[g] = (xt.to(device), yt.to(device))
            self.tests[p] = test_cache[g]
            self.norm[p] = (tuple(ds.mean), tuple(ds.std))
            geom = (ds.channels, ds.image_size)
            self.geometry[p] = geom
            if geom not in self.public:
                self.public[geom] = to_geometry(public_x, *geom).to(device)
            model = self.build_model(e, ds.channels, ds.image_size, task_outputs(e, ds.num_classes))
            self.models[p] = model
            self.aug[p] = torch_generator(cfg.seed, p, "augment", device)
            self.public_digest[p] = 0
            self.sample_digest[p] = 0
            if e.group not in described:
                described[e.group] = {"group": e.group, "model": e.model, "task": e.task, "dataset": e.dataset_key,
                                      "parameters": count_parameters(model),
                                      "trainable": count_parameters(model, trainable_only=True),
                                      "representation_trainable": sum(
                                          t.numel() for t in model.representation_parameters(trainable_only=True)),
                                      "outputs": task_outputs(e, ds.num_classes), "input": list(geom)}
        models = ctx.world.allgather(described) if ctx.world.size > 1 else [described]
        merged: dict[int, dict] = {}
        for part in models:
            merged.update(part)
        width = max(len(c) for c in counts.values())
        ctx.record_manifest(
            peers_spec=spec.manifest(),
            models=[merged[g] for g in sorted(merged)],
            public={"dataset": spec.public_key, "size": self.n_public, "batch": cfg.public_batch,
                    "rep_dim": cfg.rep_dim, "source": spec.source,
                    "conversion": "RGB->gray by luma (0.2989, 0.587, 0.114) or gray->RGB by repetition, then "
                                  "antialiased bilinear resize to the peer's size, uint8; normalised with the "
                                  "peer's own dataset statistics"},
            partition={"kind": cfg.partition, "alpha": cfg.alpha, "beta": cfg.beta, "within": "task group",
                       "sizes": [int(parts[p].size) for p in range(ctx.n_peers)],
                       "class_counts": [counts[p] + [0] * (width - len(counts[p])) for p in range(ctx.n_peers)],
                       "task_groups": [group_of[p] for p in range(ctx.n_peers)]},
            alignment={"loss": cfg.loss, "muscle_m": cfg.muscle_m, "contrastive_steps": cfg.contrastive_steps,
                       "tau": MUSCLE_TAU, "tau_prev": MUSCLE_TAU_PREV,
                       "gram_tau": GRAM_DEFAULT_TAU, "gram_label_smoothing": GRAM_LABEL_SMOOTHING},
        )

    def build_model(self, entry: PeerEntry, channels: int, image_size: int, outputs: int) -> RepresentationNet:
        """Encoder + task head initialised as a SupervisedNet from (seed, SHARED, "init"), so a one-group run
        starts exactly where the supervised methods start; the projection from "init/projection"."""
        opts = dict(entry.model_options)
        if entry.model.startswith("hf:"):
            opts.setdefault("lora_rank", self.cfg.lora_rank)
        encoder = build_encoder(entry.model, channels, image_size, **opts)
        sup = SupervisedNet(encoder, outputs)
        init_model(sup, torch_generator(self.cfg.seed, SHARED, "init"))
        net = RepresentationNet(encoder, self.cfg.rep_dim, sup.classifier)
        init_model(net.projection, torch_generator(self.cfg.seed, SHARED, "init/projection"))
        return net.to(self.ctx.device)

    # ------------------------------------------------------------------ local training
    def batch_loss(self, peer: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        mean, std = self.norm[peer]
        out = self.models[peer](supervised_augment(x, self.aug[peer], mean, std))
        if self.entries[peer].multilabel:
            return F.binary_cross_entropy_with_logits(out, y)
        return F.cross_entropy(out, y)

    # ------------------------------------------------------------------ alignment
    def rep_optimizer(self, peer: int, round: int) -> torch.optim.Optimizer:
        """The optimiser of the peer's representation model (trainable encoder tensors + projection): new each
        round unless --keep-optimizer."""
        opt = self.rep_optimizers.get(peer) if self.cfg.keep_optimizer else None
        if opt is None:
            params = list(self.models[peer].representation_parameters(trainable_only=True))
            opt = self.rep_optimizers[peer] = self.make_optimizer(params)
        for group in opt.param_groups:
            group["lr"] = self.lr_at(round)
        return opt

    def represent(self, peer: int, idx: torch.Tensor) -> torch.Tensor:
        """normalise(h(x_pub)) of the public images ``idx`` in the peer's input format, with gradient."""
        mean, std = self.norm[peer]
        x = normalize(self.public[self.geometry[peer]][idx], mean, std)
        model = self.models[peer]
        model.train()
        return F.normalize(model.represent(x).float(), dim=1)

    def communicate(self, round: int, active: set[int]) -> dict[int, dict[str, float]] | None:
        cfg = self.cfg
        if not self.communicates or cfg.contrastive_steps == 0:
            return None
        local_active = [p for p in self.ctx.local_peers if p in active]
        opts = {p: self.rep_optimizer(p, round) for p in local_active}
        aligned: dict[int, dict[str, float]] = {}
        for step in range(cfg.contrastive_steps):
            idx_np = public_batch_indices(cfg.seed, round, step, self.n_public, cfg.public_batch)
            idx = torch.as_tensor(idx_np, device=self.ctx.device)
            reps = {p: self.represent(p, idx) for p in local_active}
            payloads = {p: z.detach().contiguous() for p, z in reps.items()}
            inbox = self.ctx.exchange.exchange(payloads, round, kind="reps", active=active)
            for p in local_active:
                self.public_digest[p] = zlib.crc32(idx_np.astype(np.int64).tobytes(), self.public_digest[p])
                chosen = sample_neighbours(cfg.seed, p, round, step, list(inbox[p]), cfg.muscle_m)
                self.sample_digest[p] = zlib.crc32(np.asarray([-1, *chosen], dtype=np.int64).tobytes(),
                                                   self.sample_digest[p])
                if not chosen:
                    continue
                others = torch.stack([inbox[p][q].to(reps[p].device) for q in chosen])
                loss = align_loss(cfg.loss, reps[p], others)
                opts[p].zero_grad(set_to_none=True)
                loss.backward()
                opts[p].step()
                self.last_align[p] = float(loss.detach())
                aligned[p] = {"muscle_loss": self.last_align[p]}
            del reps, payloads, inbox
        return aligned

    def consensus_vectors(self) -> None:
        return None

    # ------------------------------------------------------------------ evaluation
    def score_peer(self, peer: int) -> dict[str, Any]:
        """The peer's task metric on its task's test set (and F1 for multi-label)."""
        model = self.models[peer]
        model.eval()
        mean, std = self.norm[peer]
        x, y = self.tests[peer]
        logits = features(model, x, mean, std, self.ctx.device)
        if self.entries[peer].multilabel:
            s = multilabel_scores(logits, y)
            out: dict[str, Any] = {"task_metric": s["mAP"], "task_metric_name": "mAP", "mAP": s["mAP"],
                                   "f1": s["f1"], "f1_micro": s["f1_micro"]}
        else:
            acc = float((logits.argmax(1).cpu() == y.cpu()).float().mean())
            out = {"task_metric": acc, "task_metric_name": "accuracy", "accuracy": acc}
        if peer in self.last_align:
            out["muscle_loss"] = self.last_align[peer]
        if self.communicates and self.cfg.contrastive_steps > 0:
            out["public_digest"] = f"{self.public_digest[peer]:08x}"
            out["sample_digest"] = f"{self.sample_digest[peer]:08x}"
        return out

    def evaluate(self, round: int, final: bool) -> tuple[dict[str, float], dict[int, dict[str, Any]]]:
        per_peer = {p: self.score_peer(p) for p in self.ctx.local_peers}
        mine = {p: (self.entries[p].task, m["task_metric"]) for p, m in per_peer.items()}
        world = self.ctx.world
        parts = world.gather(mine) if world.size > 1 else [mine]
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
        stats = ctx.exchange.stats
        mine = {p: int(stats.peer_sent.get(p, 0)) for p in ctx.local_peers}
        parts = ctx.world.gather(mine) if ctx.world.size > 1 else [mine]
        if parts is None:
            return {}
        sent: dict[int, int] = {}
        for part in parts:
            sent.update(part)
        rounds = max(1, cfg.rounds)
        steps = cfg.contrastive_steps if self.communicates else 0
        degrees = [ctx.graph.degree(p) for p in range(ctx.n_peers)]
        m_server = min(cfg.muscle_m, ctx.n_peers - 1)
        server = server_bytes_per_round(ctx.n_peers, steps, cfg.public_batch, cfg.rep_dim, m_server)
        return {"communication": {
            "bytes_sent_per_peer_round": sum(sent.values()) / (len(sent) * rounds),
            "bytes_sent_per_peer_round_by_peer": {str(p): v / rounds for p, v in sorted(sent.items())},
            "p2p_formula": "each active peer sends T*deg*B*d*4 bytes a round (its B x d float32 Z to each "
                           "neighbour, every contrastive step) and receives as much",
            "p2p_bytes_per_peer_round_expected": steps * (sum(degrees) / len(degrees)) * cfg.public_batch
                                                  * cfg.rep_dim * FLOAT_BYTES,
            "server_formula": "paper's server design, full participation, float32: per peer and step the "
                              "uplink is B*d and the downlink B^M*(d+1) (S^n: B^M x d aggregated sums, alpha^n: "
                              "B^M weights); per round T*K*(B*d + B^M*(d+1))*4 bytes, M = min(muscle_m, K-1)",
            "server_M": m_server,
            "server_uplink_bytes_per_peer_round": server["uplink_bytes_per_peer"],
            "server_downlink_bytes_per_peer_round": server["downlink_bytes_per_peer"],
            "server_bytes_per_round": server["bytes_per_round"],
        }}

    # ------------------------------------------------------------------ checkpoints
    def peer_state(self, peer: int) -> dict[str, Any]:
        state = super().peer_state(peer)
        state["fedmuscle"] = {"last_align": self.last_align.get(peer), "public_digest": self.public_digest[peer],
                              "sample_digest": self.sample_digest[peer]}
        if peer in self.rep_optimizers and self.cfg.keep_optimizer:
            state["rep_optimizer"] = self.rep_optimizers[peer].state_dict()
        return state

    def load_peer_state(self, peer: int, state: dict[str, Any]) -> None:
        super().load_peer_state(peer, state)
        extra = state.get("fedmuscle", {})
        if extra.get("last_align") is not None:
            self.last_align[peer] = float(extra["last_align"])
        self.public_digest[peer] = int(extra.get("public_digest", 0))
        self.sample_digest[peer] = int(extra.get("sample_digest", 0))
        if "rep_optimizer" in state:
            self.rep_optimizer(peer, 1).load_state_dict(state["rep_optimizer"])


class FedMuscleLocal(FedMuscle):
    """The same heterogeneous peers trained alone: FedMuscle with no alignment phase (the Δ% baseline)."""

    name = "local"
    communicates = False


class Local:
    """``--algorithm local``: with ``--peers-spec``, the heterogeneous peers of the spec trained alone
    (:class:`FedMuscleLocal`, whose per-peer ``task_metric`` the Δ% report compares against); without it, the
    supervised local baseline of Dec-SSL (:class:`p2pfl.algorithms.supervised.Local`)."""

    name = "local"

    def __new__(cls, ctx: RunContext):  # type: ignore[misc]
        if ctx.cfg.peers_spec is not None:
            return FedMuscleLocal(ctx)
        from p2pfl.algorithms.supervised import Local as SupervisedLocal
        return SupervisedLocal(ctx)
