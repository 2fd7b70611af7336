"""How the learning methods score a model: linear probe and kNN on encoder features, or test accuracy; for many
peers at once, the same scores from one peer-stacked pass (p2pfl.models.stacked) and one batched probe; on token
sequences (p2pfl.capabilities.TOKENS), next-token accuracy and perplexity."""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from p2pfl.evaluation import EVAL_BATCH, accuracy, features, features_of, knn_accuracy, linear_probes
from p2pfl.models.stacked import PeerStack, unfold
from p2pfl.seeding import SHARED, torch_generator


def probe_generator(seed: int, device: torch.device) -> torch.Generator:
    """The linear probe's stream: one for every model scored (the network average, each peer, the untrained
    encoder), so all are measured with the same initialisation and sample order; a peer's probe depends on its
    encoder alone, whatever rank or chunk scores it."""
    return torch_generator(seed, SHARED, "probe", device)


def representation_scores(learner, model: nn.Module, peer: int | None, final: bool) -> dict[str, float]:
    """kNN monitor always; the linear probe at the final evaluation (features of the full labelled set), fitted by
    `linear_probes` as a batch of one: the same probe as peers scored together, at its speed."""
    ds, cfg, device = learner.dataset, learner.cfg, learner.ctx.device
    train_f = features(model.features, ds.x_train, ds.mean, ds.std, device)
    test_f = features(model.features, ds.x_test, ds.mean, ds.std, device)
    train_y, test_y = ds.y_train.to(device), ds.y_test.to(device)
    out = {}
    if peer is None:
        out["knn_acc"] = knn_accuracy(train_f, train_y, test_f, test_y, ds.num_classes, k=cfg.knn_k)
    if final:
        gen = probe_generator(cfg.seed, device)
        out["probe_acc"] = linear_probes(train_f[None], train_y, test_f[None], test_y, ds.num_classes,
                                         cfg.probe_epochs, gen)[0]
    return out


def classifier_scores(learner, model: nn.Module, logits_of=None) -> dict[str, float]:
    """Top-1 test accuracy of the model's own classifier."""
    ds = learner.dataset
    fn = logits_of(model) if logits_of is not None else model
    return {"test_acc": accuracy(fn, ds.x_test, ds.y_test, ds.mean, ds.std, learner.ctx.device)}


def next_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of token sequences B×T: every token but the last, and each position's next token."""
    return x[:, :-1], x[:, 1:]


@torch.no_grad()
def token_scores(learner, model: nn.Module, logits_of=None, batch: int = EVAL_BATCH) -> dict[str, float]:
    """On the test sequences: test_acc, the accuracy of the last position's prediction (the sequence's label: a
    LEAF sample's next character, LEAF's metric); token_acc, over every predicted position; perplexity, exp of
    the mean cross-entropy over every predicted position (summed in float64)."""
    ds, device = learner.dataset, learner.ctx.device
    fn = logits_of(model) if logits_of is not None else model
    nll = torch.zeros((), dtype=torch.float64, device=device)
    hits = last = 0
    for start in range(0, ds.x_test.shape[0], batch):
        inputs, targets = next_token(ds.x_test[start:start + batch].to(device))
        logits = fn(inputs)
        nll += F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum").double()
        predicted = logits.argmax(-1)
        hits += int((predicted == targets).sum())
        last += int((predicted[:, -1] == targets[:, -1]).sum())
    n, positions = ds.x_test.shape[0], ds.x_test.shape[0] * (ds.x_test.shape[1] - 1)
    return {"test_acc": last / n, "token_acc": hits / positions, "perplexity": float(torch.exp(nll / positions))}


def stacked_outputs(stacked: nn.Module, stack: PeerStack, x_uint8: torch.Tensor, mean, std, device: torch.device,
                    part: str = "", select: Callable = lambda out: out, batch: int = EVAL_BATCH) -> torch.Tensor:
    """[n, N, D]: select(output) of the stacked models' submodule `part` ("" the whole model, "encoder" its
    features) in eval mode on all of x, every peer seeing the same images (one pass, batch by batch)."""
    module = stacked.get_submodule(part)
    module.eval()
    prefix = f"{part}." if part else ""
    cut = lambda d: {k[len(prefix):]: v for k, v in d.items() if k.startswith(prefix)}  # noqa: E731
    state = (cut(stack.params), cut(stack.buffers))
    n = next(iter(stack.params.values())).shape[0]
    out = features(lambda xb: select(functional_call(module, state, (xb,))), x_uint8, mean, std, device, batch)
    return unfold(out, n)


def peer_outputs(learner, stacked: nn.Module, stack: PeerStack, peers: list[int], x_uint8: torch.Tensor,
                 part: str = "", select: Callable = lambda out: out) -> torch.Tensor:
    """[n, N, D] outputs of several peers' models on the same images: one peer-stacked pass on a GPU (one
    launch per layer for all of them); on a CPU, where the grouped kernels of the stacked pass are no faster than
    the dense ones (benchmarks/bench_batched_peers.py), model after model on each batch, normalised once for all.
    The result is a view of sample-major storage [N, n, D] (linear_probes reads it in order)."""
    ds, device = learner.dataset, learner.ctx.device
    if device.type != "cpu":
        return stacked_outputs(stacked, stack, x_uint8, ds.mean, ds.std, device, part=part, select=select)
    modules = [learner.peers[p].model.eval().get_submodule(part) for p in peers]
    fns = [lambda x, m=module: select(m(x)) for module in modules]
    return features_of(fns, x_uint8, ds.mean, ds.std, device).transpose(0, 1)


def representation_scores_stacked(learner, stacked: nn.Module, stack: PeerStack, peers: list[int],
                                  final: bool) -> list[dict[str, float]]:
    """`representation_scores` of several peers' models (stacked in `stack`, in the order of `peers`): their
    features (`peer_outputs`), their linear probes as one batched logistic regression (same streams per peer)."""
    if not final:
        return [{} for _ in peers]
    ds, cfg, device = learner.dataset, learner.cfg, learner.ctx.device
    train_f = peer_outputs(learner, stacked, stack, peers, ds.x_train, part="encoder")
    test_f = peer_outputs(learner, stacked, stack, peers, ds.x_test, part="encoder")
    accs = linear_probes(train_f, ds.y_train.to(device), test_f, ds.y_test.to(device), ds.num_classes,
                         cfg.probe_epochs, probe_generator(cfg.seed, device))
    return [{"probe_acc": a} for a in accs]


def classifier_scores_stacked(learner, stacked: nn.Module, stack: PeerStack, peers: list[int],
                              select: Callable = lambda out: out) -> list[dict[str, float]]:
    """`classifier_scores` of several peers' models (`peer_outputs` over the test set)."""
    ds = learner.dataset
    logits = peer_outputs(learner, stacked, stack, peers, ds.x_test, select=select)
    hits = (logits.argmax(2).cpu() == ds.y_test.cpu()[None]).float().mean(1)
    return [{"test_acc": float(h)} for h in hits]
