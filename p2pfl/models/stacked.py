"""Several peers' copies of one architecture run as one computation (--batch-peers).

Peers are folded into the channel axis: the activations of n peers with batches of N images are one tensor
[N, n·C, ...], peer i owning channels i·C … (i+1)·C − 1. A Conv2d becomes a grouped convolution (its groups times
n), BatchNorm over n·C channels keeps every peer's own batch statistics and running buffers, and Linear is a
batched matmul over [n, N, D]. Element-wise and per-channel operations (ReLU, pooling, flatten, residual adds)
need no change, so a model's own forward runs unchanged under `torch.func.functional_call` with stacked tensors
[n, *shape] in place of its parameters and buffers. Peer i's result is the one its own model would compute
(up to the summation order of the grouped kernels).

A first layer may also take an input shared by all peers ([N, C, ...]: evaluation features), which runs as one
dense convolution or matmul with n times the outputs.

Only modules known to act per channel qualify: the leaf layers in `_LEAVES`, and containers whose class says so
with ``peer_stackable = True`` (the built-in CNN encoders and heads). Anything else (attention, LayerNorm,
dropout, Hugging Face models) is reported by `why_not_stackable` and trains peer by peer.
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

_LEAVES = (nn.ReLU, nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.Flatten, nn.Identity)


def why_not_stackable(model: nn.Module) -> str | None:
    """None when `model` can run peer-stacked, else the first module that prevents it (for the user)."""
    for name, m in model.named_modules():
        where = name or type(model).__name__
        if isinstance(m, nn.Conv2d):
            if m.padding_mode != "zeros":
                return f"{where}: Conv2d with padding_mode {m.padding_mode!r}"
        elif isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            if not (m.affine and m.track_running_stats) or m.momentum is None:
                return f"{where}: BatchNorm without affine parameters, running statistics or a momentum"
        elif isinstance(m, (nn.Linear, nn.Sequential, *_LEAVES)):
            continue
        elif not getattr(type(m), "peer_stackable", False):
            return f"{where}: {type(m).__name__} is not known to act per channel"
    return None


class _PeerConv2d(nn.Module):
    def __init__(self, conv: nn.Conv2d) -> None:
        super().__init__()
        self.in_channels, self.out_channels = conv.in_channels, conv.out_channels
        self.stride, self.padding, self.dilation, self.groups = conv.stride, conv.padding, conv.dilation, conv.groups
        self.weight = conv.weight
        self.bias = conv.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = self.weight.shape[0]
        bias = None if self.bias is None else self.bias.reshape(-1)
        shared = x.shape[1] == self.in_channels and n > 1
        groups = self.groups if shared else self.groups * n
        return F.conv2d(x, self.weight.flatten(0, 1), bias, self.stride, self.padding, self.dilation, groups)


class _PeerLinear(nn.Module):
    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.weight = linear.weight
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, out, d = self.weight.shape
        if x.dim() != 2:
            raise ValueError(f"peer-stacked Linear takes [N, n*D] inputs, got shape {tuple(x.shape)}")
        if x.shape[1] == d and n > 1:  # one input shared by every peer
            y = x @ self.weight.reshape(n * out, d).t()
            return y if self.bias is None else y + self.bias.reshape(-1)
        xb = x.view(x.shape[0], n, d).transpose(0, 1)
        wt = self.weight.transpose(1, 2)
        y = torch.bmm(xb, wt) if self.bias is None else torch.baddbmm(self.bias.unsqueeze(1), xb, wt)
        return y.transpose(0, 1).reshape(x.shape[0], n * out)


class _PeerBatchNorm(nn.Module):
    def __init__(self, bn: nn.BatchNorm1d | nn.BatchNorm2d) -> None:
        super().__init__()
        self.momentum, self.eps = bn.momentum, bn.eps
        self.weight = bn.weight
        self.bias = bn.bias
        self.register_buffer("running_mean", bn.running_mean)
        self.register_buffer("running_var", bn.running_var)
        self.register_buffer("num_batches_tracked", bn.num_batches_tracked)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.num_batches_tracked.add_(1)
        return F.batch_norm(x, self.running_mean.reshape(-1), self.running_var.reshape(-1), self.weight.reshape(-1),
                            self.bias.reshape(-1), self.training, self.momentum, self.eps)


def peer_stacked(model: nn.Module) -> nn.Module:
    """A parameter-free copy of `model` whose layers run peer-stacked; call it with
    `functional_call(stacked, (params, buffers), x)` where every tensor is [n, *shape] (see the module doc)."""
    reason = why_not_stackable(model)
    if reason is not None:
        raise ValueError(f"cannot stack peers of {type(model).__name__}: {reason}")
    out = copy.deepcopy(model).to("meta")
    for parent in list(out.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Conv2d):
                setattr(parent, name, _PeerConv2d(child))
            elif isinstance(child, nn.Linear):
                setattr(parent, name, _PeerLinear(child))
            elif isinstance(child, (nn.BatchNorm1d, nn.BatchNorm2d)):
                setattr(parent, name, _PeerBatchNorm(child))
    return out


def fold(x: torch.Tensor, channels_last: bool = False) -> torch.Tensor:
    """Per-peer inputs [n, N, C, ...] as one peer-stacked batch [N, n·C, ...] (one copy); with `channels_last`
    images [n, N, C, H, W] come in the channels-last memory format, in which a CPU's grouped convolutions, their
    backward and the pooling between them run faster (benchmarks/bench_batched_peers.py)."""
    n, b = x.shape[:2]
    if channels_last and x.dim() == 5:
        c, h, w = x.shape[2:]
        return x.permute(1, 3, 4, 0, 2).contiguous().view(b, h, w, n * c).permute(0, 3, 1, 2)
    return x.transpose(0, 1).reshape(b, n * x.shape[2], *x.shape[3:])


def unfold(y: torch.Tensor, n: int) -> torch.Tensor:
    """A peer-stacked output [N, n·D] as per-peer outputs [n, N, D]."""
    return y.view(y.shape[0], n, -1).transpose(0, 1)


class PeerStack:
    """The parameters and buffers of several models of one architecture, each stacked over the models in the
    given order (tensor [n, *shape] per name), taken from the models and written back to them."""

    def __init__(self, models: list[nn.Module]) -> None:
        first = models[0]
        self.names = [n for n, _ in first.named_parameters()]
        self.trainable = [n for n, p in first.named_parameters() if p.requires_grad]
        self.buffer_names = [n for n, _ in first.named_buffers()]
        with torch.no_grad():
            per_model = [_tensors(m) for m in models]
            self.params = {n: torch.stack([t[0][k] for t in per_model]) for k, n in enumerate(self.names)}
            self.buffers = {n: torch.stack([t[1][k] for t in per_model]) for k, n in enumerate(self.buffer_names)}

    def prefix(self, n: int, grad: bool = False) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """(parameters, buffers) of the first n models as views; with `grad` the trainable parameters are fresh
        leaves that require gradients (they still share the stack's storage)."""
        params = {}
        for name, t in self.params.items():
            view = t[:n]
            params[name] = view.detach().requires_grad_() if grad and name in self.trainable else view
        return params, {name: t[:n] for name, t in self.buffers.items()}

    def clone(self) -> PeerStack:
        """A copy of the stacked tensors (a snapshot to restore models from)."""
        out = copy.copy(self)
        out.params = {n: t.clone() for n, t in self.params.items()}
        out.buffers = {n: t.clone() for n, t in self.buffers.items()}
        return out

    def finite(self) -> torch.Tensor:
        """Per model: whether all its floating-point parameters and buffers are finite (a bool tensor [n])."""
        tensors = [t for t in (*self.params.values(), *self.buffers.values()) if t.is_floating_point()]
        with torch.no_grad():
            return torch.stack([torch.isfinite(t.flatten(1)).all(1) for t in tensors]).all(0)

    def write_back(self, models: list[nn.Module], index: list[int] | None = None) -> None:
        """Copy each model's slice back into it (models[j] gets slice index[j], by default j), one multi-tensor
        copy for all."""
        index = list(range(len(models))) if index is None else index
        stacked = (*self.params.values(), *self.buffers.values())
        dst, src = [], []
        for m, i in zip(models, index):
            params, buffers = _tensors(m)
            dst += [*params, *buffers]
            src += [t[i] for t in stacked]
        with torch.no_grad():
            torch._foreach_copy_(dst, src)


def _tensors(model: nn.Module) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The model's parameters and buffers, in named_parameters / named_buffers order."""
    return [p.detach() for p in model.parameters()], list(model.buffers())
