"""Parameter utilities for the gossip runtime: BatchNorm detection (FedBN), the flat mixable state,
deterministic initialisation, counting."""
from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from .base import ModelConfigError

# BatchNorm1d/2d/3d, SyncBatchNorm and the Lazy variants all derive from _BatchNorm.
BN_TYPES: tuple[type, ...] = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm, _BatchNorm)
FEDBN_RULES = ("type", "decssl")


def _bn_modules(model: nn.Module) -> Iterable[tuple[str, nn.Module, nn.Module | None, str]]:
    """(qualified name, BN module, parent module, attribute name in parent) for every BN module."""
    for pname, parent in model.named_modules():
        for cname, child in parent.named_children():
            if isinstance(child, BN_TYPES):
                yield (f"{pname}.{cname}" if pname else cname), child, parent, cname
    if isinstance(model, BN_TYPES):
        yield "", model, None, ""


def bn_tensor_names(model: nn.Module, rule: str = "type") -> set[str]:
    """Names (as in ``named_parameters`` / ``named_buffers``) of the tensors FedBN keeps local.

    rule="type" (true FedBN, Li et al. 2021): every tensor of every BatchNorm module found by module type
    (weight, bias, running_mean, running_var, num_batches_tracked).
    rule="decssl": emulates Dec-SSL's ``--average_without_bn`` name filter on its torchvision backbone
    (algorithms.md §B.6): the running statistics of every BN, plus weight/bias only of the BNs inside
    residual blocks (BasicBlock/Bottleneck ``bn*``); stem, downsample and head BN affine params are mixed.
    """
    if rule not in FEDBN_RULES:
        raise ModelConfigError(f"fedbn rule must be one of {', '.join(FEDBN_RULES)}, got {rule!r}")
    names: set[str] = set()
    seen: set[int] = set()
    for qname, bn, parent, attr in _bn_modules(model):
        if id(bn) in seen:
            continue
        seen.add(id(bn))
        prefix = qname + "." if qname else ""
        in_block = (parent is not None and type(parent).__name__ in ("BasicBlock", "Bottleneck")
                    and attr.startswith("bn"))
        for n, _ in bn.named_parameters(recurse=False):
            if rule == "type" or in_block:
                names.add(prefix + n)
        for n, _ in bn.named_buffers(recurse=False):
            if rule == "type" or n in ("running_mean", "running_var"):
                names.add(prefix + n)
    # Keep only names that the model itself reports (shared modules are reported once, under one name).
    reported = {n for n, _ in model.named_parameters()} | {n for n, _ in model.named_buffers()}
    return names & reported


def bn_parameter_mask(model: nn.Module, rule: str = "type") -> list[bool]:
    """For each tensor of ``model.parameters()`` (in order): True when it belongs to a BatchNorm module."""
    names = bn_tensor_names(model, rule)
    return [n in names for n, _ in model.named_parameters()]


def _fedbn_rule(fedbn: bool | str) -> str | None:
    if fedbn is False or fedbn is None or fedbn == "off":
        return None
    if fedbn is True:
        return "type"
    if isinstance(fedbn, str) and fedbn in FEDBN_RULES:
        return fedbn
    raise ModelConfigError(f"fedbn must be true, false or one of {', '.join(FEDBN_RULES)}, got {fedbn!r}")


class MixableState:
    """The ordered floating tensors that gossip mixes, viewed as one vector: float64 when every tensor is
    (a --dtype float64 run), float32 otherwise.

    Tensors: ``model.named_parameters()`` then the floating ``model.named_buffers()``; integer buffers
    (num_batches_tracked) are never included; with ``fedbn`` the BatchNorm tensors (``bn_tensor_names``) are
    left out; with ``trainable_only`` parameters with requires_grad=False are left out (buffers stay).
    The tensors are held by reference: build one MixableState per model after it is on its device, and do
    not replace its parameters afterwards (in-place updates are fine).
    """

    def __init__(self, model: nn.Module, fedbn: bool | str = False, trainable_only: bool = False) -> None:
        rule = _fedbn_rule(fedbn)
        excluded = bn_tensor_names(model, rule) if rule else set()
        self.names: list[str] = []
        self.tensors: list[torch.Tensor] = []
        for n, p in model.named_parameters():
            if n in excluded or (trainable_only and not p.requires_grad) or not p.is_floating_point():
                continue
            self.names.append(n)
            self.tensors.append(p)
        for n, b in model.named_buffers():
            if n in excluded or not b.is_floating_point():
                continue
            self.names.append(n)
            self.tensors.append(b)
        self.sizes: list[int] = [t.numel() for t in self.tensors]
        self.numel: int = int(sum(self.sizes))
        devices = {t.device for t in self.tensors}
        if len(devices) > 1:
            raise ModelConfigError(f"MixableState: model tensors are on several devices {sorted(map(str, devices))}")
        self.device = devices.pop() if devices else torch.device("cpu")
        wide = bool(self.tensors) and all(t.dtype == torch.float64 for t in self.tensors)
        self.dtype: torch.dtype = torch.float64 if wide else torch.float32
        self._all_same = all(t.dtype == self.dtype for t in self.tensors)

    def new_buffer(self) -> torch.Tensor:
        """An uninitialised vector (``dtype``) of length ``numel`` on the model's device (allocate once, reuse)."""
        return torch.empty(self.numel, dtype=self.dtype, device=self.device)

    def _check(self, vec: torch.Tensor, what: str) -> None:
        if vec.dim() != 1 or vec.numel() != self.numel or vec.dtype != self.dtype or not vec.is_contiguous():
            raise ValueError(
                f"MixableState.{what}: need a contiguous {str(self.dtype)[6:]} vector of {self.numel} elements, "
                f"got shape {tuple(vec.shape)} dtype {vec.dtype}"
            )

    @torch.no_grad()
    def flatten(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """The mixable tensors concatenated into one vector (``dtype``), written into ``out`` when given."""
        if out is None:
            out = self.new_buffer()
        else:
            self._check(out, "flatten")
        if not self.tensors:
            return out
        if self._all_same and out.device == self.device:
            torch.cat([t.detach().reshape(-1) for t in self.tensors], out=out)
        else:
            for t, v in zip(self.tensors, out.split(self.sizes)):
                v.copy_(t.detach().reshape(-1))
        return out

    @torch.no_grad()
    def unflatten_(self, vec: torch.Tensor) -> None:
        """Copy ``vec`` back into the model's tensors in place (casting to each tensor's dtype)."""
        self._check(vec, "unflatten_")
        for t, v in zip(self.tensors, vec.split(self.sizes)):
            t.copy_(v.view(t.shape))


# ---------------------------------------------------------------- initialisation

def _init_tree(module: nn.Module, path: str) -> None:
    hook = getattr(module, "p2pfl_init_", None)
    if callable(hook):
        hook()
        return
    reset = getattr(module, "reset_parameters", None)
    if callable(reset):
        reset()
    elif isinstance(module, nn.MultiheadAttention):
        module._reset_parameters()
    elif any(True for _ in module.parameters(recurse=False)):
        raise ModelConfigError(
            f"init_model: module {path or '<root>'} ({type(module).__name__}) holds parameters but has neither "
            "reset_parameters() nor p2pfl_init_()"
        )
    for name, child in module.named_children():
        _init_tree(child, f"{path}.{name}" if path else name)


def init_model(model: nn.Module, generator: torch.Generator) -> nn.Module:
    """Re-initialise ``model`` in place so that its weights depend only on ``generator``'s state.

    Scheme: one 63-bit seed is drawn from ``generator``; under ``torch.random.fork_rng`` (CPU only) the CPU
    default generator is seeded with it and the module tree is walked in registration order: a module that
    defines ``p2pfl_init_()`` re-initialises its whole subtree with its documented scheme (CifarResNet:
    kaiming fan_out / BN 1-0; ViT: transformers' scheme; HF pretrained: keeps pretrained weights, re-draws
    LoRA adapters); any other module calls its own ``reset_parameters()`` (PyTorch defaults, BN running stats
    reset) and then its children. Tensors on an accelerator are moved to the CPU for the draw and back, so
    the result is the same on any device. The global RNG state (CPU and CUDA) is left untouched.
    """
    dev = generator.device
    seed = int(torch.randint(0, 2**63 - 1, (1,), generator=generator, device=dev).item())
    tensors = list(model.parameters()) + [b for b in model.buffers()]
    moved = [(t, t.device) for t in tensors if t.device.type != "cpu"]
    with torch.no_grad():
        for t, _ in moved:
            t.data = t.data.to("cpu")
        try:
            with torch.random.fork_rng(devices=[]):
                torch.default_generator.manual_seed(seed)
                _init_tree(model, "")
        finally:
            for t, d in moved:
                t.data = t.data.to(d)
    return model


def state_copy(module: nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of every tensor of the module's state dict (a point to roll back to, or to save)."""
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of scalar parameters (shared tensors counted once); only requires_grad ones if asked."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def trainable_parameter_names(model: nn.Module) -> list[str]:
    """Names of the parameters with requires_grad=True, in ``named_parameters`` order."""
    return [n for n, p in model.named_parameters() if p.requires_grad]
