"""Evaluation: features of a frozen encoder, the linear probe, the kNN monitor, test accuracy, multi-label
scores, weight drift."""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from p2pfl.data import normalize

EVAL_BATCH = 1024


@torch.no_grad()
def features(fn: Callable[[torch.Tensor], torch.Tensor], x_uint8: torch.Tensor, mean, std,
             device: torch.device, batch: int = EVAL_BATCH) -> torch.Tensor:
    """fn(normalised images) for all of x, batch by batch, as one tensor of the run's dtype on `device`."""
    return features_of([fn], x_uint8, mean, std, device, batch)[:, 0]


@torch.no_grad()
def features_of(fns: list[Callable[[torch.Tensor], torch.Tensor]], x_uint8: torch.Tensor, mean, std,
                device: torch.device, batch: int = EVAL_BATCH) -> torch.Tensor:
    """[N, n, ...] in the run's dtype on `device`: fns[i](normalised images) for all of x, each batch normalised
    once for every fn; sample-major, as `linear_probes` reads several peers' features."""
    out: torch.Tensor | None = None
    for start in range(0, x_uint8.shape[0], batch):
        xb = normalize(x_uint8[start:start + batch].to(device), mean, std)
        for i, fn in enumerate(fns):
            f = fn(xb).to(torch.get_default_dtype())
            if out is None:
                out = torch.empty((x_uint8.shape[0], len(fns), *f.shape[1:]), dtype=f.dtype, device=device)
            out[start:start + xb.shape[0], i] = f
    assert out is not None, "no images"
    return out


def linear_probe(train_f: torch.Tensor, train_y: torch.Tensor, test_f: torch.Tensor, test_y: torch.Tensor,
                 num_classes: int, epochs: int, generator: torch.Generator, lr: float = 1e-2,
                 batch: int = 512) -> float:
    """Test accuracy of a linear classifier fitted (Adam, cross-entropy) on frozen, standardised features.

    The plain one-model probe (nn.Linear, autograd, torch.optim.Adam): the reference that `linear_probes`, which
    the runs use, is tested against (tests/test_batched_probe.py)."""
    mu, sigma = train_f.mean(0, keepdim=True), train_f.std(0, keepdim=True).clamp_min(1e-6)
    train_f, test_f = (train_f - mu) / sigma, (test_f - mu) / sigma
    device = train_f.device
    clf = nn.Linear(train_f.shape[1], num_classes).to(device)
    with torch.no_grad():
        clf.weight.copy_(torch.randn(clf.weight.shape, generator=generator, device=generator.device).to(device)
                         * 0.01)
        clf.bias.zero_()
    opt = torch.optim.Adam(clf.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, epochs))
    n = train_f.shape[0]
    for _ in range(epochs):
        order = torch.randperm(n, generator=generator, device=generator.device).to(device)
        for start in range(0, n, batch):
            idx = order[start:start + batch]
            loss = F.cross_entropy(clf(train_f[idx]), train_y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        sched.step()
    with torch.no_grad():
        return float((clf(test_f).argmax(1) == test_y).float().mean())


@torch.no_grad()
def knn_accuracy(train_f: torch.Tensor, train_y: torch.Tensor, test_f: torch.Tensor, test_y: torch.Tensor,
                 num_classes: int, k: int = 200, temperature: float = 0.1, batch: int = 512) -> float:
    """Weighted kNN monitor on cosine similarity (k neighbours, exp(sim/T) votes)."""
    train_f = F.normalize(train_f, dim=1)
    test_f = F.normalize(test_f, dim=1)
    k = min(k, train_f.shape[0])
    correct = 0
    for start in range(0, test_f.shape[0], batch):
        sim = test_f[start:start + batch] @ train_f.T
        top, idx = sim.topk(k, dim=1)
        votes = torch.zeros(sim.shape[0], num_classes, device=sim.device)
        votes.scatter_add_(1, train_y[idx], (top / temperature).exp())
        correct += int((votes.argmax(1) == test_y[start:start + batch]).sum())
    return correct / test_f.shape[0]


def _standardised_sample_major(train_f: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x [N, P, D + 1], mu [P, D], sigma [P, D]): each peer's features standardised over the N samples (mean,
    standard deviation with Bessel's correction, clamped at 1e-6 as in `linear_probe`), stored sample-major with
    a trailing column of ones (the bias's input). Reductions run over row blocks: torch.std / vector_norm across
    the sample axis are ten to thirty times slower on a CPU."""
    peers, n, d = train_f.shape
    by_sample = train_f.transpose(0, 1)  # [N, P, D]
    mu = by_sample.mean(0)
    x = torch.empty((n, peers, d + 1), dtype=train_f.dtype, device=train_f.device)
    x[..., d] = 1
    centred = torch.sub(by_sample, mu, out=x[..., :d])
    block = max(1, (16 << 20) // max(1, peers * d * train_f.element_size()))
    squares = sum(centred[i:i + block].square().sum(0) for i in range(0, n, block))
    sigma = squares.div_(max(n - 1, 1)).sqrt_().clamp_min_(1e-6)
    centred.div_(sigma)
    return x, mu, sigma


def _linear_probes_fit(train_f: torch.Tensor, train_y: torch.Tensor, num_classes: int, epochs: int,
                       generator: torch.Generator, lr: float = 1e-2, batch: int = 512
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fit P linear probes at once on train_f [P, N, D] (shared labels [N]) as one batched logistic regression,
    every peer with the same initialisation and sample order from `generator` (the draws of one `linear_probe`).

    Returns (weight [P, C, D], bias [P, C], mu [P, D], sigma [P, D]); peer i's probe is what `linear_probe` fits on
    train_f[i] with a generator in `generator`'s state, up to float rounding: the matmuls are batched, the
    cross-entropy's gradient is written out ((softmax − one-hot) / batch), and the bias is the weight column of
    a constant input (Adam is elementwise, so one tensor [W | b] steps as the two). A minibatch of all peers is
    one gather of contiguous rows of the sample-major copy; the logits are computed transposed ([P, C, b]: on a
    CPU W·xᵀ is three times faster than x·Wᵀ for C ≪ b).
    """
    peers, n, d = train_f.shape
    device = train_f.device
    x, mu, sigma = _standardised_sample_major(train_f)
    init = torch.randn((num_classes, d), generator=generator, device=generator.device).to(device) * 0.01
    weight = torch.zeros((peers, num_classes, d + 1), dtype=x.dtype, device=device)
    weight[..., :d] = init
    weight.requires_grad_(True)
    opt = torch.optim.Adam([weight], lr=lr, fused=True if device.type in ("cpu", "cuda") else None)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, epochs))
    rows = x.view(n, peers * (d + 1))
    onehot = F.one_hot(train_y.to(device), num_classes).t().to(x.dtype)  # [C, N]
    with torch.no_grad():
        for _ in range(epochs):
            order = torch.randperm(n, generator=generator, device=generator.device).to(device)
            for start in range(0, n, batch):
                idx = order[start:start + batch]
                b = idx.shape[0]
                xb = rows.index_select(0, idx).view(b, peers, d + 1).transpose(0, 1)  # [P, b, D + 1]
                logits = torch.bmm(weight, xb.transpose(1, 2))  # [P, C, b]
                dlogits = torch.softmax(logits, dim=1).sub_(onehot[:, idx])  # b · d(mean CE)/d logits
                weight.grad = torch.bmm(dlogits, xb).div_(b)
                opt.step()
            sched.step()
    weight = weight.detach()
    return weight[..., :d], weight[..., d], mu, sigma


def linear_probes(train_f: torch.Tensor, train_y: torch.Tensor, test_f: torch.Tensor, test_y: torch.Tensor,
                  num_classes: int, epochs: int, generator: torch.Generator, lr: float = 1e-2,
                  batch: int = 512, max_bytes: int = 512 * 2**20) -> list[float]:
    """`linear_probe` for P peers at once: train_f [P, N, D], test_f [P, M, D], shared labels [N] / [M].

    Every peer is probed with the same instrument: entry i equals linear_probe(train_f[i], train_y, test_f[i],
    test_y, num_classes, epochs, g, lr, batch) up to float rounding, for g a generator in `generator`'s state;
    `generator` ends as one such call leaves it. Fitting P tiny probes as one batched problem removes the per-step
    overhead that dominates the one-by-one loop. Peers go a chunk at a time, each chunk's standardised copy
    under `max_bytes` (results do not depend on it: each chunk starts from the same generator state).
    """
    peers, n, d = train_f.shape
    chunk = max(1, max_bytes // max(1, n * d * train_f.element_size()))
    state = generator.get_state()
    out: list[float] = []
    for lo in range(0, peers, chunk):
        hi = min(peers, lo + chunk)
        generator.set_state(state)
        weight, bias, mu, sigma = _linear_probes_fit(train_f[lo:hi], train_y, num_classes, epochs, generator, lr,
                                                     batch)
        with torch.no_grad():
            test = (test_f[lo:hi] - mu.unsqueeze(1)).div_(sigma.unsqueeze(1))
            pred = torch.baddbmm(bias.unsqueeze(1), test, weight.transpose(1, 2)).argmax(2)
            out.extend(float(a) for a in (pred == test_y.to(pred.device).unsqueeze(0)).float().mean(1))
    return out


@torch.no_grad()
def knn_accuracies(train_f: torch.Tensor, train_y: torch.Tensor, test_f: torch.Tensor, test_y: torch.Tensor,
                   num_classes: int, k: int = 200, temperature: float = 0.1, batch: int = 512,
                   max_block_bytes: int = 256 * 2**20) -> list[float]:
    """`knn_accuracy` for P peers at once: train_f [P, N, D], test_f [P, M, D], shared labels [N] / [M].

    Same rule (cosine similarity, top-k, exp(sim/T) weighted votes) and the same `batch` test-row blocks, with
    one bmm over a chunk of peers chosen so the similarity block [chunk, batch, N] stays under max_block_bytes.
    """
    peers, n, _ = train_f.shape
    m = test_f.shape[1]
    k = min(k, n)
    per_peer = min(batch, max(m, 1)) * n * train_f.element_size()
    chunk = max(1, max_block_bytes // max(per_peer, 1))
    out: list[float] = []
    for lo in range(0, peers, chunk):
        hi = min(peers, lo + chunk)
        tr = F.normalize(train_f[lo:hi], dim=2).transpose(1, 2)  # [c, D, N]
        te = F.normalize(test_f[lo:hi], dim=2)
        correct = torch.zeros(hi - lo, dtype=torch.long, device=train_f.device)
        for start in range(0, m, batch):
            sim = torch.bmm(te[:, start:start + batch], tr)  # [c, b, N]
            top, idx = sim.topk(k, dim=2)
            del sim
            votes = torch.zeros(hi - lo, top.shape[1], num_classes, device=top.device)
            votes.scatter_add_(2, train_y[idx], (top / temperature).exp())
            correct += (votes.argmax(2) == test_y[start:start + batch].unsqueeze(0)).sum(1)
        out.extend(int(c) / m for c in correct.tolist())
    return out


@torch.no_grad()
def accuracy(model_fn: Callable[[torch.Tensor], torch.Tensor], x_uint8: torch.Tensor, y: torch.Tensor, mean, std,
             device: torch.device) -> float:
    """Top-1 accuracy of logits = model_fn(normalised images)."""
    logits = features(model_fn, x_uint8, mean, std, device)
    return float((logits.argmax(1).cpu() == y.cpu()).float().mean())


def weight_drift(a: nn.Module | dict[str, torch.Tensor], b: nn.Module | dict[str, torch.Tensor]) -> float:
    """d_w(a, b) = Σ over parameter tensors of ‖w_a − w_b‖₂ (SPEC §2, seed 001)."""
    sa = dict(a.named_parameters()) if isinstance(a, nn.Module) else a
    sb = dict(b.named_parameters()) if isinstance(b, nn.Module) else b
    return float(sum(float((sa[n].detach().double() - sb[n].detach().double()).norm()) for n in sa))


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
