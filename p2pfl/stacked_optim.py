"""SGD, Adam and AdamW over parameters stacked across peers, for peers trained as one computation.

Each tensor is [P, *shape], peer i's parameter being row i. A step updates the peers 0..n-1 of an active prefix with
a handful of batched (`torch._foreach_*`) kernels over all tensors instead of P separate `torch.optim` optimisers,
and leaves peers n..P-1, parameters and state, bitwise untouched. Per peer, the result is what the `torch.optim`
optimiser of `p2pfl.optim` (default settings apart from lr, momentum, Nesterov and weight decay) would compute from
the same gradients, up to float rounding: peers keep their own step counts, hence their own Adam bias correction and the
moment their SGD momentum buffer starts. `load_from` and `export_to` move the state to and from such per-peer
optimisers.
"""
from __future__ import annotations

import torch

KINDS = ("sgd", "adam", "adamw")
_BETA1, _BETA2, _EPS = 0.9, 0.999, 1e-8
_STATE_KEYS = {"sgd": ("momentum_buffer",), "adam": ("exp_avg", "exp_avg_sq"), "adamw": ("exp_avg", "exp_avg_sq")}


class StackedOptimizer:
    """`kind` ("sgd", "adam" or "adamw") over the stacked `params` ([P, *shape] each), updated in place.

    `momentum` is SGD's; Adam and AdamW ignore it, as `p2pfl.optim` does. `nesterov`: SGD's Nesterov momentum
    (torch.optim.SGD(nesterov=True): the step is d + μ·buf, buf = μ·buf + d), which needs a momentum."""

    def __init__(self, params: list[torch.Tensor], kind: str, *, lr: float, momentum: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown optimiser kind {kind!r} (one of {', '.join(KINDS)})")
        if nesterov and (kind != "sgd" or momentum == 0):
            raise ValueError(f"Nesterov momentum is SGD's with a momentum, got {kind} with momentum {momentum}")
        if not params:
            raise ValueError("no parameters to optimise")
        self.params = list(params)
        self.P = self.params[0].shape[0]
        first = self.params[0]
        for t in self.params:
            if t.dim() == 0 or t.shape[0] != self.P:
                raise ValueError(f"every parameter must be stacked over the {self.P} peers, got shape {tuple(t.shape)}")
            if t.device != first.device or t.dtype != first.dtype:
                raise ValueError("all stacked parameters must share one device and dtype")
            if not t.is_contiguous():
                raise ValueError("stacked parameters must be contiguous")
        self.kind = kind
        self.lr = float(lr)
        self.momentum = float(momentum)
        self.nesterov = bool(nesterov)
        self.weight_decay = float(weight_decay)
        self._inner = [t[0].numel() for t in self.params]
        self._steps = torch.zeros(self.P, dtype=torch.float32, device=first.device)
        self._bufs: list[list[torch.Tensor]] | None = None

    @property
    def steps(self) -> torch.Tensor:
        """Steps taken by each peer ([P], float32), as torch's Adam counts them."""
        return self._steps

    def _n_buffers(self) -> int:
        if self.kind == "sgd":
            return 1 if self.momentum != 0 else 0
        return 2

    def _ensure_state(self) -> list[list[torch.Tensor]]:
        if self._bufs is None:
            self._bufs = [[torch.zeros_like(t) for t in self.params] for _ in range(self._n_buffers())]
        return self._bufs

    def _rows(self, tensors: list[torch.Tensor], n: int) -> list[torch.Tensor]:
        """Views [n, numel] of the first n peers' rows."""
        return [t[:n].view(n, k) for t, k in zip(tensors, self._inner)]

    def _column(self, values: torch.Tensor) -> torch.Tensor:
        """A per-peer factor as an [n, 1] column in the parameters' dtype."""
        return values.to(self.params[0].dtype).unsqueeze(1)

    @torch.no_grad()
    def step(self, grads: list[torch.Tensor], n: int | None = None) -> None:
        """One step of peers 0..n-1 (all peers when n is None) with `grads`, each [P, *shape] or [n, *shape]."""
        n = self.P if n is None else n
        if not 0 <= n <= self.P:
            raise ValueError(f"active prefix n={n} outside 0..{self.P}")
        if len(grads) != len(self.params):
            raise ValueError(f"{len(grads)} gradients for {len(self.params)} parameters")
        for g, t in zip(grads, self.params):
            if g.shape[0] not in (n, self.P) or g.shape[1:] != t.shape[1:]:
                raise ValueError(f"gradient of shape {tuple(g.shape)} for a parameter of shape {tuple(t.shape)}")
        if n == 0:
            return
        ps = self._rows(self.params, n)
        gs = [g[:n].reshape(n, k) for g, k in zip(grads, self._inner)]
        bufs = [self._rows(b, n) for b in self._ensure_state()]
        steps = self._steps[:n]
        if self.kind == "sgd":
            self._sgd(ps, gs, bufs, steps)
        else:
            self._adam(ps, gs, bufs, steps)

    def _sgd(self, ps: list[torch.Tensor], gs: list[torch.Tensor], bufs: list[list[torch.Tensor]],
             steps: torch.Tensor) -> None:
        if self.weight_decay != 0:
            gs = torch._foreach_add(gs, ps, alpha=self.weight_decay)
        if self.momentum != 0:
            (buf,) = bufs
            # buffers are zero until a peer's first step, where momentum * 0 + d_p is torch's initial buf = d_p
            torch._foreach_mul_(buf, self.momentum)
            torch._foreach_add_(buf, gs)
            gs = torch._foreach_add(gs, buf, alpha=self.momentum) if self.nesterov else buf
        steps += 1
        torch._foreach_add_(ps, gs, alpha=-self.lr)

    def _adam(self, ps: list[torch.Tensor], gs: list[torch.Tensor], bufs: list[list[torch.Tensor]],
              steps: torch.Tensor) -> None:
        exp_avg, exp_avg_sq = bufs
        steps += 1
        if self.weight_decay != 0:
            if self.kind == "adamw":
                torch._foreach_mul_(ps, 1 - self.lr * self.weight_decay)
            else:
                gs = torch._foreach_add(gs, ps, alpha=self.weight_decay)
        torch._foreach_lerp_(exp_avg, gs, 1 - _BETA1)
        torch._foreach_mul_(exp_avg_sq, _BETA2)
        torch._foreach_addcmul_(exp_avg_sq, gs, gs, 1 - _BETA2)
        del gs
        exact = torch.float32 if steps.device.type == "mps" else torch.float64
        t = steps.to(exact)
        bc2_sqrt = self._column((1 - _BETA2 ** t).sqrt())
        neg_step_size = self._column(-self.lr / (1 - _BETA1 ** t))
        k = len(exp_avg_sq)
        denom = torch._foreach_sqrt(exp_avg_sq)
        torch._foreach_div_(denom, [bc2_sqrt] * k)
        torch._foreach_add_(denom, _EPS)
        torch._foreach_div_(denom, [neg_step_size] * k)
        torch._foreach_addcdiv_(ps, exp_avg, denom)

    def reset(self) -> None:
        """Forget all state, as a freshly built optimiser."""
        self._steps.zero_()
        self._bufs = None

    def state_bytes(self) -> int:
        """Bytes of optimiser state held (step counts and buffers)."""
        held = [self._steps] + [t for b in self._bufs or [] for t in b]
        return sum(t.numel() * t.element_size() for t in held)

    def _check_peers(self, opts: list[torch.optim.Optimizer], params_per_peer: list[list[torch.nn.Parameter]]) -> None:
        if len(opts) != self.P or len(params_per_peer) != self.P:
            raise ValueError(f"{len(opts)} optimisers and {len(params_per_peer)} parameter lists for {self.P} peers")
        for i, (opt, own) in enumerate(zip(opts, params_per_peer)):
            if len(own) != len(self.params) or any(p.shape != t.shape[1:] for p, t in zip(own, self.params)):
                raise ValueError(f"peer {i}'s parameters do not match the stacked ones")
            self._check_settings(opt)

    def _check_settings(self, opt: torch.optim.Optimizer) -> None:
        expected: dict[str, object]
        if self.kind == "sgd":
            cls = torch.optim.SGD
            expected = {"momentum": self.momentum, "dampening": 0, "nesterov": self.nesterov}
        else:
            cls = torch.optim.Adam
            expected = {"betas": (_BETA1, _BETA2), "eps": _EPS, "amsgrad": False,
                        "decoupled_weight_decay": self.kind == "adamw"}
        expected |= {"weight_decay": self.weight_decay, "maximize": False}
        if not isinstance(opt, cls):
            raise ValueError(f"a {type(opt).__name__} is not a {self.kind} optimiser")
        for group in opt.param_groups:
            for key, value in expected.items():
                have = group.get(key, value)
                if (tuple(have) if key == "betas" else have) != value:
                    raise ValueError(f"{type(opt).__name__} has {key}={have!r}, the stacked one {value!r}")

    @torch.no_grad()
    def load_from(self, opts: list[torch.optim.Optimizer], params_per_peer: list[list[torch.nn.Parameter]]) -> None:
        """Take the state of peer i's `opts[i]` over `params_per_peer[i]` (in stacked order); no state is step 0.

        Torch's SGD keeps no step count, so an SGD peer with a momentum buffer counts as having taken one step."""
        self._check_peers(opts, params_per_peer)
        found: list[list[dict | None]] = []
        steps = []
        for i, (opt, own) in enumerate(zip(opts, params_per_peer)):
            states = [opt.state[p] if p in opt.state and opt.state[p] else None for p in own]
            if self._n_buffers() == 0:
                states = [None] * len(own)
            elif self.kind == "sgd":
                states = [s if s is not None and s.get("momentum_buffer") is not None else None for s in states]
            counts = {0.0 if s is None else (float(s["step"]) if "step" in s else 1.0) for s in states}
            if len(counts) != 1:
                raise ValueError(f"peer {i}'s parameters have taken different numbers of steps: {sorted(counts)}")
            found.append(states)
            steps.append(counts.pop())
        self.reset()
        self._steps.copy_(torch.tensor(steps, dtype=torch.float32))
        if not any(steps):
            return
        bufs = self._ensure_state()
        for i, states in enumerate(found):
            for j, s in enumerate(states):
                if s is not None:
                    for b, key in zip(bufs, _STATE_KEYS[self.kind]):
                        b[j][i].copy_(s[key])

    @torch.no_grad()
    def export_to(self, opts: list[torch.optim.Optimizer], params_per_peer: list[list[torch.nn.Parameter]]) -> None:
        """Write the stacked state into the per-peer `opts` over `params_per_peer`, replacing theirs, so that they
        continue as this optimiser would (learning rates are left to the caller)."""
        self._check_peers(opts, params_per_peer)
        steps = self._steps.tolist()
        for i, (opt, own) in enumerate(zip(opts, params_per_peer)):
            for j, p in enumerate(own):
                opt.state.pop(p, None)
                if steps[i] == 0 or not self._bufs:
                    continue
                state: dict[str, torch.Tensor] = {}
                if self.kind != "sgd":
                    state["step"] = torch.tensor(steps[i], dtype=torch.float32)
                for b, key in zip(self._bufs, _STATE_KEYS[self.kind]):
                    state[key] = b[j][i].to(device=p.device, dtype=p.dtype, copy=True)
                opt.state[p] = state
