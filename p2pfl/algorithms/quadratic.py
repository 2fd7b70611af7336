"""The quadratic test problem of SPEC §7 (Koloskova et al. 2020; Vogels et al. 2021): the fast, exact test bed of
every decentralised optimiser (--gossip, p2pfl.gossip.schemes).

Peer i holds f_i(x) = ½‖A_i x − b_i‖², in float64 whatever --dtype says: generated as A_i = (i + 1)/√K · I_d and
b_i ~ N(0, ζ²/(i + 1)² · I_d) from the stream (seed, i, "quadratic"), or read from --problem FILE.npz (arrays A
[K, d, d] and b [K, d]; --dim is then the file's). Every peer starts at x₀ = 1. A round: each active peer takes
E = --local-steps (default 1: the papers' form) plain gradient steps of size --lr from its model (no momentum:
--momentum is qgm's μ only; --optimizer is sgd), each gradient
A_iᵀ(A_i x − b_i) plus, with --sgd-noise σ², N(0, σ²/d · I) from its stream (seed, i, "sgd-noise"); its G is the
gradient itself for E = 1 and (x − x_E)/η for more (SPEC §7: the local update divided by −η); then the scheme
mixes. Every round record carries `error`, the mean over the alive peers and coordinates of (x_i − x*)², x* the
minimiser of Σ_i f_i (least squares over the stacked A_i, b_i); round 0 holds the start's. There is nothing to
catch up on: a peer back from sitting out goes on from the model it kept (--rejoin is ignored, as consensus does).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from p2pfl.algorithms.peer import derived
from p2pfl.capabilities import GIVES_GRADIENTS, HANDS_OVER, MIXES_BY_W
from p2pfl.context import RunContext
from p2pfl.gossip import exact_mean
from p2pfl.gossip.schemes.base import DEBIASED
from p2pfl.heterogeneity import zeta2
from p2pfl.method import Algorithm, LocalRound, Phase
from p2pfl.network import RoundNetwork
from p2pfl.options import Check, method_options, opt
from p2pfl.runtime.checkpoint import CHECKPOINT
from p2pfl.seeding import numpy_rng, torch_generator

F64 = torch.float64


@method_options("quadratic")
class QuadraticOptions:
    """The quadratic test problem (SPEC §7)."""

    validated_after: ClassVar[str] = "run"

    dim: int = opt(10, "dimension d of the quadratic problem (--algorithm quadratic)", section="quadratic",
                   bounds=">= 1")
    zeta2: float = opt(1.0, "heterogeneity ζ² of the quadratic problem: b_i ~ N(0, ζ²/(i+1)² I)", section="quadratic",
                       paper="Koloskova et al. 2020 / Vogels et al. 2021's generator", bounds=">= 0")
    sgd_noise: float = opt(0.0, "variance σ² of the gradient noise N(0, σ²/d I) of the quadratic problem",
                           section="quadratic", bounds=">= 0")
    problem: str | None = opt(None, "the quadratic problem from FILE.npz: arrays A [K, d, d] and b [K, d]",
                              section="quadratic")

    def validate(self, check: Check) -> None:
        check(self.problem is None or os.path.isfile(self.problem), "problem", f"file not found: {self.problem}")


def read_problem(path: str, n_peers: int) -> tuple[np.ndarray, np.ndarray]:
    """A [K, d, d] and b [K, d] from an .npz file; a ValueError of one line naming --problem otherwise."""
    def fail(why: str) -> ValueError:
        return ValueError(f"--problem {path}: {why}")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: np.asarray(data[k]) for k in ("A", "b") if k in data.files}
    except (OSError, ValueError, EOFError) as exc:
        raise fail(f"not a readable .npz file ({type(exc).__name__})") from None
    if set(arrays) != {"A", "b"}:
        raise fail(f"needs arrays 'A' and 'b', found {sorted(arrays) or 'neither'}")
    A, b = arrays["A"], arrays["b"]
    d = b.shape[-1] if b.ndim == 2 else None
    if A.ndim != 3 or b.ndim != 2 or A.shape[0] != n_peers or b.shape[0] != n_peers or A.shape[1:] != (d, d):
        raise fail(f"A must have shape [K, d, d] and b [K, d] with K = {n_peers} peers; got A {list(A.shape)}, "
                   f"b {list(b.shape)}")
    if not (np.issubdtype(A.dtype, np.number) and np.issubdtype(b.dtype, np.number)):
        raise fail(f"A and b must be numeric, got {A.dtype} and {b.dtype}")
    A, b = A.astype(np.float64), b.astype(np.float64)
    if not (np.isfinite(A).all() and np.isfinite(b).all()):
        raise fail("A and b must be finite")
    return A, b


def generated_problem(seed: int, n_peers: int, dim: int, zeta2: float) -> tuple[np.ndarray, np.ndarray]:
    """SPEC §7's A_i = (i + 1)/√K · I_d, b_i ~ N(0, ζ²/(i + 1)² I_d) from the stream (seed, i, "quadratic"). A is
    returned as its K scalars a_i (A_i = a_i I): a d × d identity per peer would cap d near 10⁴."""
    a = np.array([(i + 1) / math.sqrt(n_peers) for i in range(n_peers)])
    b = np.stack([numpy_rng(seed, i, "quadratic").standard_normal(dim) * math.sqrt(zeta2) / (i + 1)
                  for i in range(n_peers)])
    return a, b


def optimum(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """x* = argmin Σ_i ½‖A_i x − b_i‖²: Σ a_i b_i / Σ a_i² for scalar A_i = a_i I, else least squares over the
    stacked A_i and b_i."""
    if A.ndim == 1:
        return (A[:, None] * b).sum(0) / (A ** 2).sum()
    return np.linalg.lstsq(A.reshape(-1, A.shape[-1]), b.reshape(-1), rcond=None)[0]


def apply(A: torch.Tensor, x: torch.Tensor, transpose: bool = False) -> torch.Tensor:
    """A_i x (or A_iᵀ x): a product with the peer's matrix, or a scale by its scalar (bitwise the same as the
    product with a_i I)."""
    if A.dim() == 0:
        return A * x
    return (A.T if transpose else A) @ x


def _ordered_sum(values: dict[int, float]) -> float:
    """Σ in ascending peer order: the same float whichever ranks held the peers."""
    total = 0.0
    for p in sorted(values):
        total += values[p]
    return total


@dataclass(eq=False)
class QuadraticPeer:
    """A peer of the quadratic problem: its model, its noise stream and its scheme's state (trackers, last model
    and gradient: p2pfl.gossip.schemes), all checkpointed; its A_i, b_i and the round's G are rebuilt."""

    id: int = field(metadata={CHECKPOINT: False})
    x: torch.Tensor
    noise: torch.Generator
    scheme: dict[str, torch.Tensor] = field(default_factory=dict)
    A: torch.Tensor = derived()
    b: torch.Tensor = derived()
    g: torch.Tensor = derived()
    attack_memory: dict[str, Any] = field(default_factory=dict, kw_only=True)


class Quadratic(Algorithm):
    name = "quadratic"
    headline = "loss"
    defaults: ClassVar[dict[str, Any]] = {"dtype": "float64", "optimizer": "sgd"}
    # plain gradient steps
    allowed: ClassVar[dict[str, tuple[Any, ...]]] = {"optimizer": ("sgd",), "nesterov": (False,)}
    capabilities = frozenset({MIXES_BY_W, GIVES_GRADIENTS, HANDS_OVER})  # the test bed of every --gossip scheme
    ignores = {**dict.fromkeys(
        ("dataset", "data_dir", "download", "partition", "rotate_groups", "train_subset", "validation", "model",
         "local_epochs", "batch_size", "weight_decay", "keep_optimizer", "batch_peers", "fedbn", "sl_augment",
         "crop_scale", "weight_by_data", "probe_epochs", "knn_k"),
        "quadratic takes --local-steps gradient steps of size --lr on its generated problem: no data, no model"),
        "peer_scores": "quadratic records every peer's error at every evaluation already"}

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.peers: dict[int, QuadraticPeer] = {}
        self.x_star: torch.Tensor | None = None

    def setup(self) -> None:
        cfg, n = self.cfg, self.ctx.n_peers
        A, b = (read_problem(cfg.problem, n) if cfg.problem is not None
                else generated_problem(cfg.seed, n, cfg.dim, cfg.zeta2))
        self.x_star = torch.from_numpy(optimum(A, b)).to(self.ctx.device)
        for p in self.ctx.local_peers:
            self.peers[p] = QuadraticPeer(
                id=p, x=torch.ones(b.shape[-1], dtype=F64, device=self.ctx.device),
                noise=torch_generator(cfg.seed, p, "sgd-noise", self.ctx.device),
                A=torch.as_tensor(A[p]).to(self.ctx.device), b=torch.from_numpy(b[p]).to(self.ctx.device))
        self.ctx.record_manifest(quadratic={"dim": int(b.shape[-1]), "source": cfg.problem or "generated",
                                            "x_star_norm": float(np.linalg.norm(self.x_star.cpu().numpy()))})

    @staticmethod
    def exact_gradient(peer: QuadraticPeer, x: torch.Tensor) -> torch.Tensor:
        """∇f_i(x) = A_iᵀ(A_i x − b_i)."""
        return apply(peer.A, apply(peer.A, x) - peer.b, transpose=True)

    def gradient(self, peer: QuadraticPeer, x: torch.Tensor) -> torch.Tensor:
        """The exact gradient plus the --sgd-noise draw from the peer's stream."""
        g = self.exact_gradient(peer, x)
        if self.cfg.sgd_noise > 0:
            d = x.numel()
            g += torch.randn(d, generator=peer.noise, dtype=F64, device=x.device) * math.sqrt(self.cfg.sgd_noise / d)
        return g

    def local_steps(self, peer: int, net: RoundNetwork) -> float:
        return float(self.cfg.local_steps or 1)

    def local_updates(self, peers: list[int], round: int, net: RoundNetwork) -> LocalRound:
        lr, steps = self.cfg.lr, self.cfg.local_steps or 1
        metrics = {}
        for p in peers:
            peer = self.peers[p]
            z = self.ctx.scheme.model(peer.x, peer.scheme)
            metrics[p] = {"loss": float(0.5 * (apply(peer.A, z) - peer.b).pow(2).sum())}
            if steps == 1:
                peer.g = self.gradient(peer, z)
                continue
            x = z.clone()
            for _ in range(steps):
                x -= lr * self.gradient(peer, x)
            peer.g = (z - x) / lr
        return LocalRound(metrics)

    def communicate(self, round: int, net: RoundNetwork) -> Phase:
        active = [p for p in sorted(self.peers) if p in net.active]
        mixed = self.ctx.scheme.rounds(self.ctx.gossip, {p: self.peers[p].x for p in active},
                                       {p: self.peers[p].g for p in active}, self.cfg.lr,
                                       {p: self.peers[p].scheme for p in active}, net, round,
                                       steps=self.cfg.gossip_steps)
        for p, x in mixed.vectors.items():
            self.peers[p].x = x
        return Phase(events=mixed.events)

    def consensus_vectors(self) -> dict[int, torch.Tensor]:
        return {p: self.ctx.scheme.model(peer.x, peer.scheme) for p, peer in self.peers.items()}

    def carried(self, peer: int) -> torch.Tensor:
        return self.peers[peer].x

    def carry(self, peer: int, vector: torch.Tensor) -> None:
        self.peers[peer].x = vector

    def errors(self, net: RoundNetwork) -> dict[int, float]:
        """Each local alive peer's Σ_coordinates (x_i − x*)² (x_i its model: push-sum's x/w)."""
        return {p: float((self.ctx.scheme.model(self.peers[p].x, self.peers[p].scheme) - self.x_star).pow(2).sum())
                for p in self.alive_peers(net)}

    def round_metrics(self, round: int, net: RoundNetwork) -> dict[str, float] | None:
        """`error`: the mean over the alive peers and coordinates of (x_i − x*)², summed in peer order on rank 0
        (the same on any number of ranks); under a debiased scheme (push-sum) also the masses it keeps, over all K
        peers (crashed ones' as they were): `weight_sum` Σ_i w_i and `numerator_sum` Σ_i Σ_coordinates x_i."""
        scheme = self.ctx.scheme
        push = DEBIASED in scheme.capabilities
        mass = {p: (float(scheme.weight(peer.scheme, peer.x)), float(peer.x.sum()))
                for p, peer in self.peers.items()} if push else {}
        parts = self.ctx.world.gather((self.errors(net), mass))
        if parts is None:
            return None
        errors = {p: v for part, _ in parts for p, v in part.items()}
        out = {"error": _ordered_sum(errors) / (len(errors) * self.x_star.numel())}
        if push:
            masses = {p: v for _, part in parts for p, v in part.items()}
            out["weight_sum"] = _ordered_sum({p: w for p, (w, _) in masses.items()})
            out["numerator_sum"] = _ordered_sum({p: x for p, (_, x) in masses.items()})
        return out

    def heterogeneity(self, net: RoundNetwork) -> float | None:
        """ζ² at the network average x̄ of the evaluated peers' models, from the exact gradients A_iᵀ(A_i x̄ − b_i)
        (p2pfl.heterogeneity), on rank 0; None elsewhere or with --zeta2-batch 0. Collective."""
        if self.cfg.zeta2_batch == 0:
            return None
        n = len(self.evaluated(net))
        models = {p: self.ctx.scheme.model(self.peers[p].x, self.peers[p].scheme) for p in self.alive_peers(net)}
        mean = exact_mean(self.ctx.world, models, n, like=self.x_star).to(self.x_star.device)
        grads = {p: self.exact_gradient(self.peers[p], mean) for p in models}
        return zeta2(self.ctx.world, grads, n, self.x_star)

    def evaluate(self, round: int, final: bool, net: RoundNetwork
                 ) -> tuple[dict[str, float], dict[int, dict[str, float]]]:
        d = self.x_star.numel()
        per_peer = {p: {"error": e / d} for p, e in self.errors(net).items()}
        zeta2_avg = self.heterogeneity(net)
        metrics = self.round_metrics(round, net) or {}
        if zeta2_avg is not None:
            metrics["zeta2_avg"] = zeta2_avg
        return metrics, per_peer
