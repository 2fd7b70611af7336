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
    """fn(normalised images) for all of x, batch by batch, as one float32 tensor on `device`."""
    out = []
    for start in range(0, x_uint8.shape[0], batch):
        xb = normalize(x_uint8[start:start + batch].to(device), mean, std)
        out.append(fn(xb).float())
    return torch.cat(out)


def linear_probe(train_f: torch.Tensor, train_y: torch.Tensor, test_f: torch.Tensor, test_y: torch.Tensor,
                 num_classes: int, epochs: int, generator: torch.Generator, lr: float = 1e-2,
                 batch: int = 512) -> float:
    """Test accuracy of a linear classifier fitted (Adam, cross-entropy) on frozen, standardised features."""
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
    return float(sum(float((sa[n].detach().float() - sb[n].detach().float()).norm()) for n in sa))


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
