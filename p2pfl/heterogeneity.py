"""The heterogeneity at the network average (SPEC §10): ζ² = (1/K) Σ_i ‖∇f_i(x̄) − ∇f(x̄)‖², ∇f the mean of the ∇f_i,
over the K evaluated peers (alive and honest), recorded as `zeta2_avg`: at every evaluation where it is asked for
(--zeta2-batch N) or cheap (the quadratic problem's exact gradients); a learner's costs a forward and backward pass
of N samples a peer, about a round of training and more than scoring the one model a server round leaves, so by
default it is measured once, at the final evaluation, on DEFAULT_BATCH samples.

A learning method's f_i is the supervised part of its loss (`GossipLearner.zeta2_loss`: cross-entropy of the
model's classifier; FedProx's proximal and MOON's contrastive terms vanish or are undefined at x̄) on a fixed
batch: the first --zeta2-batch samples of the peer's shard, without augmentation, with the model in eval mode
(BatchNorm on the average's running statistics, no dropout), so ζ² is a deterministic function of x̄. Gradients
are accumulated over chunks of --batch-size. Self-supervised methods, whose losses need random views, are not
measured (`zeta2_loss` None). The quadratic problem's gradients are exact (p2pfl.algorithms.quadratic).

Collective: each rank computes its own peers' gradients; the mean is exact (fixed point) and the squared
deviations are summed in peer order on rank 0, so the value is the same on any number of ranks.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from p2pfl.comm.world import World
from p2pfl.gossip.average import spread

#: The samples a peer of a learner gives ζ² when --zeta2-batch is left unset (at the final evaluation only).
DEFAULT_BATCH = 512
#: loss(model, inputs, targets) -> a scalar mean over the batch.
Loss = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


def zeta2(world: World, gradients: dict[int, torch.Tensor], n_peers: int, like: torch.Tensor) -> float | None:
    """(1/K) Σ_i ‖g_i − ḡ‖² over the `n_peers` peers whose gradients the ranks hold; on rank 0 (None elsewhere).
    Collective; a rank holding none passes `like` (a tensor of the gradients' shape)."""
    _, total = spread(world, gradients, n_peers, like)
    return None if total is None else total / n_peers


def gradient(model: nn.Module, loss: Loss, x: torch.Tensor, y: torch.Tensor, chunk: int) -> torch.Tensor:
    """∇ of the mean `loss` over (x, y) with respect to the model's trainable parameters, flattened (float64);
    accumulated over chunks of `chunk` samples. The model's gradients are left cleared."""
    params = [p for p in model.parameters() if p.requires_grad]
    model.zero_grad(set_to_none=True)
    n = len(x)
    for i in range(0, n, chunk):
        xs, ys = x[i:i + chunk], y[i:i + chunk]
        (loss(model, xs, ys) * (len(xs) / n)).backward()
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).double()
                      for p in params])
    model.zero_grad(set_to_none=True)
    return flat


def at_average(learner, model: nn.Module, net, final: bool) -> float | None:
    """ζ² of a GossipLearner at the network average `model` over the peers evaluated in `net`'s round, on rank 0;
    None with --zeta2-batch 0, at an evaluation before the final one when --zeta2-batch is unset, or when the method
    has no supervised loss to measure (`zeta2_loss`). Collective."""
    from p2pfl.data.augment import normalize

    loss, n = learner.zeta2_loss(), learner.cfg.zeta2_batch
    if n is None:  # unset: once, at the final evaluation
        n = DEFAULT_BATCH if final else 0
    if loss is None or n == 0:
        return None
    ds = learner.dataset
    grads = {}
    for p in learner.alive_peers(net):
        x, y = learner.peers[p].data.first(n)
        grads[p] = gradient(model, loss, normalize(x, ds.mean, ds.std), y, learner.cfg.batch_size)
    like = torch.zeros(sum(p.numel() for p in model.parameters() if p.requires_grad), dtype=torch.float64)
    return zeta2(learner.ctx.world, grads, len(learner.evaluated(net)), like)
