"""DP-SGD (Abadi et al. 2016) in every local step of every peer, on the per-peer and the peer-stacked path alike.

A step of a peer: each sample's gradient of the method's loss (torch.func: functional_call, grad, vmap over the
batch's samples), clipped to L2 norm C over all trainable parameters jointly (factor min(1, C / (‖g‖ + 1e-6))),
summed, plus Gaussian noise N(0, σ²C²) per coordinate drawn from the peer's own stream (seed, peer,
"dp-noise/<steps before this round>"), divided by the batch size B. The result replaces the data term's gradient;
a data-independent penalty (FedProx's proximal term) and the optimiser (momentum, Adam, weight decay) act on it
unchanged, which is post-processing. The privatised gradient reaches the optimiser through the step's loss:
`loss = mean per-sample loss (value, no gradient) + Σ ⟨θ, g̃⟩ − Σ ⟨θ, g̃⟩ (detached)`, whose value is the loss and
whose gradient is exactly g̃, so the one local loop (p2pfl.algorithms.trainer) steps as it always does.

Sampling: the loader gives shuffled fixed-size batches (each epoch a permutation of the shard, drop-last), so B is
exact. The accountant (p2pfl.privacy.accountant) assumes Poisson sampling at rate q = B/N: for shuffled batches this
is an approximation, the one Opacus and most DP-SGD code make, not a proof (docs/privacy.md).
Per-sample gradients are undefined under BatchNorm's batch statistics: such a model is refused (`refuse_model`).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.utils._pytree import tree_map

from p2pfl.models.params import BN_TYPES
from p2pfl.privacy.accountant import NAME, ORDERS, epsilon, noise_for
from p2pfl.seeding import torch_generator

#: The purpose of a peer's noise stream (with the number of its DP steps before the round).
PURPOSE = "dp-noise"
#: Added to a gradient's norm before dividing C by it (Opacus's), so a clipped norm stays below C.
NORM_EPS = 1e-6

Criterion = Callable[[Any, torch.Tensor, list[Any]], tuple[torch.Tensor, dict[str, torch.Tensor]]]


def clipped_sum(per_sample: list[torch.Tensor], clip: float) -> list[torch.Tensor]:
    """The sum over samples of per-sample gradients ([B, n, *shape] per parameter: n peers) each clipped to L2
    norm `clip` over all parameters jointly: [n, *shape] per parameter."""
    squares = torch.stack([g.flatten(2).pow(2).sum(2) for g in per_sample]).sum(0)  # [B, n]
    factor = (clip / (squares.sqrt() + NORM_EPS)).clamp(max=1.0)
    return [torch.einsum("bn,bn...->n...", factor.to(g.dtype), g) for g in per_sample]


def zero_carrying(leaves: list[torch.Tensor], grads: list[torch.Tensor], stacked: bool) -> torch.Tensor:
    """A zero (per peer when `stacked`: [n]) whose gradient with respect to `leaves` is exactly `grads`."""
    if stacked:
        dot = sum((p * g.detach()).flatten(1).sum(1) for p, g in zip(leaves, grads))
    else:
        dot = sum((p * g.detach()).sum() for p, g in zip(leaves, grads))
    return dot - dot.detach()


@dataclass
class DPStep:
    """DP-SGD for a group's local round: the clip C, each member's σ and noise stream, the batch size B."""

    clip: float
    sigmas: list[float]
    generators: list[torch.Generator]
    batch: int

    def privatise(self, per_sample: list[torch.Tensor]) -> list[torch.Tensor]:
        """Per-sample gradients ([B, n, *shape] per parameter, n ≤ the group's members) -> (Σ clipped + noise) / B,
        [n, *shape]; member i's noise from its own stream, parameter after parameter."""
        n = per_sample[0].shape[1]
        summed = clipped_sum(per_sample, self.clip)
        for i in range(n):
            gen, scale = self.generators[i], self.sigmas[i] * self.clip
            for s in summed:
                s[i].add_(torch.randn(s.shape[1:], generator=gen, device=gen.device, dtype=s.dtype), alpha=scale)
        return [s / self.batch for s in summed]


def _detached(terms: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach() for k, v in terms.items()}


def one_peer_loss(step: DPStep, model: nn.Module, inputs: torch.Tensor, y: torch.Tensor, refs: list[Any],
                  criterion: Criterion) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """A peer's DP-SGD step loss (p2pfl.algorithms.trainer.OneBatch): the mean per-sample loss, carrying the
    privatised gradient of its trainable parameters; the named terms averaged over the samples."""
    params = dict(model.named_parameters())
    names = [k for k, p in params.items() if p.requires_grad]
    fixed = {**{k: p.detach() for k, p in params.items() if not p.requires_grad}, **dict(model.named_buffers())}

    def one(trained: dict[str, torch.Tensor], x: torch.Tensor, target: torch.Tensor, ref: list[Any]):
        x, target, ref = tree_map(lambda t: t.unsqueeze(0), (x, target, ref))
        loss, terms = criterion(functional_call(model, {**fixed, **trained}, (x,)), target, ref)
        return loss, (loss.detach(), _detached(terms))

    trained = {k: params[k].detach() for k in names}
    grads, (losses, terms) = vmap(grad(one, has_aux=True), in_dims=(None, 0, 0, 0),
                                  randomness="different")(trained, inputs, y, refs)
    private = step.privatise([grads[k].unsqueeze(1) for k in names])
    loss = losses.mean() + zero_carrying([params[k] for k in names], [g[0] for g in private], stacked=False)
    return loss, {k: v.mean() for k, v in terms.items()}


def stacked_loss(step: DPStep, stacked: nn.Module, params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor],
                 trainable: list[str], inputs: torch.Tensor, y: torch.Tensor, refs: list[Any], n: int,
                 per_peer: Callable[[Any], Any], criterion: Criterion) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The DP-SGD step losses ([n]) of n peer-stacked peers (p2pfl.algorithms.batched.StackedBatch): `inputs`
    folded [B, n·C, ...], targets [n, B, ...], reference outputs per peer [n, B, ...]; for every sample index the
    stacked model runs the n peers' samples at once, and the gradient of the sum of their losses is each peer's
    own (its parameters' rows see its loss only)."""
    fixed = {**{k: v.detach() for k, v in params.items() if k not in trainable}, **buffers}

    def one(trained: dict[str, torch.Tensor], x: torch.Tensor, target: torch.Tensor, ref: list[Any]):
        out = per_peer(functional_call(stacked, {**fixed, **trained}, (x.unsqueeze(0),)))
        losses, terms = vmap(criterion)(out, target.unsqueeze(1), tree_map(lambda t: t.unsqueeze(1), ref))
        return losses.sum(), (losses.detach(), _detached(terms))

    trained = {k: params[k].detach() for k in trainable}
    grads, (losses, terms) = vmap(grad(one, has_aux=True), in_dims=(None, 0, 1, 1),
                                  randomness="different")(trained, inputs, y, refs)
    private = step.privatise([grads[k] for k in trainable])
    loss = losses.mean(0) + zero_carrying([params[k] for k in trainable], private, stacked=True)
    return loss, {k: v.mean(0) for k, v in terms.items()}


def refuse_model(model: nn.Module, name: str) -> None:
    """ValueError (one line) for a model whose per-sample gradients are undefined: BatchNorm's batch statistics."""
    for path, module in model.named_modules():
        if isinstance(module, BN_TYPES):
            raise ValueError(f"--dp-clip: per-sample gradients are undefined under BatchNorm's batch statistics, and "
                             f"--model {name} has one ({path}: {type(module).__name__}); use a model without "
                             "BatchNorm (simple-cnn, mlp)")


class Accounted(Protocol):
    """A peer as DP-SGD accounts it: its id and the DP steps it has taken (p2pfl.algorithms.peer.Peer)."""

    id: int
    dp_steps: int


@dataclass
class DPSGD:
    """The run's DP-SGD: clip C, δ, σ (given, or per peer solved for the target ε over the run) and each local
    peer's sampling rate q = B/N; a peer's DP steps so far live in its record (`dp_steps`, checkpointed), so its ε
    by the accountant and its next noise draw survive a resume."""

    clip: float
    delta: float
    noise: float | None
    target: float | None
    seed: int
    device: torch.device
    rates: dict[int, float] = field(default_factory=dict)
    sigmas: dict[int, float] = field(default_factory=dict)

    @classmethod
    def from_config(cls, cfg: Any, device: torch.device) -> DPSGD:
        return cls(clip=cfg.dp_clip, delta=cfg.dp_delta, noise=cfg.dp_noise, target=cfg.dp_epsilon, seed=cfg.seed,
                   device=device)

    def add_peer(self, peer: int, shard: int, batch: int, planned_steps: int) -> None:
        """Account a peer of `shard` samples trained on batches of `batch`; with a target ε its σ is the one that
        spends it in `planned_steps` steps (the run's rounds × its full local steps: stragglers spend less)."""
        rate = min(1.0, batch / shard)
        self.rates[peer] = rate
        if self.noise is None:
            self.sigmas[peer] = noise_for(self.target, self.delta, rate, planned_steps)
            return
        try:  # a σ the accountant cannot account would fail at the first round's record, after set-up
            epsilon(self.noise, rate, planned_steps, self.delta)
        except ValueError as exc:
            raise ValueError(f"--dp-noise {self.noise:g}: {exc}") from None
        self.sigmas[peer] = self.noise

    def round_step(self, peers: Sequence[Accounted], batch: int) -> DPStep:
        """DP-SGD for the local round of `peers` (in the group's order) on batches of `batch`; each peer's noise
        stream is keyed by the DP steps it has taken so far, so no two rounds share one."""
        gens = [torch_generator(self.seed, p.id, f"{PURPOSE}/{p.dp_steps}", self.device) for p in peers]
        return DPStep(self.clip, [self.sigmas[p.id] for p in peers], gens, batch)

    def account(self, peer: Accounted, steps: int) -> float:
        """Count a local round of `steps` DP steps of `peer` (in its record); its ε over the run so far."""
        peer.dp_steps += steps
        return self.epsilon(peer)

    def epsilon(self, peer: Accounted) -> float:
        return epsilon(self.sigmas[peer.id], self.rates[peer.id], peer.dp_steps, self.delta)

    def record(self) -> dict[str, Any]:
        """This rank's peers for the manifest's `dp_sgd` entry: σ, q and planned settings by peer."""
        return {str(p): {"sigma": self.sigmas[p], "rate": self.rates[p]} for p in sorted(self.sigmas)}

    def settings(self) -> dict[str, Any]:
        """The run-level settings of the manifest's `dp_sgd` entry."""
        return {"clip": self.clip, "delta": self.delta, "noise": self.noise, "target_epsilon": self.target,
                "accountant": NAME, "orders": [ORDERS[0], ORDERS[-1]],
                "sampling": "shuffled fixed-size batches, accounted as Poisson sampling at q = B/N (approximation)",
                "noise_stream": f"(seed, peer, '{PURPOSE}/<steps so far>')"}
