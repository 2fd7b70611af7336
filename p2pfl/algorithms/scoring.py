"""How the learning methods score a model: linear probe and kNN on encoder features, or test accuracy."""
from __future__ import annotations

from torch import nn

from p2pfl.evaluation import accuracy, features, knn_accuracy, linear_probe
from p2pfl.seeding import SHARED, torch_generator


def representation_scores(learner, model: nn.Module, peer: int | None, final: bool) -> dict[str, float]:
    """kNN monitor always; the linear probe at the final evaluation (features of the full labelled set)."""
    ds, cfg, device = learner.dataset, learner.cfg, learner.ctx.device
    train_f = features(model.features, ds.x_train, ds.mean, ds.std, device)
    test_f = features(model.features, ds.x_test, ds.mean, ds.std, device)
    train_y, test_y = ds.y_train.to(device), ds.y_test.to(device)
    out = {}
    if peer is None:
        out["knn_acc"] = knn_accuracy(train_f, train_y, test_f, test_y, ds.num_classes, k=cfg.knn_k)
    if final:
        gen = torch_generator(cfg.seed, SHARED if peer is None else peer, "probe", device)
        out["probe_acc"] = linear_probe(train_f, train_y, test_f, test_y, ds.num_classes, cfg.probe_epochs, gen)
    return out


def classifier_scores(learner, model: nn.Module, logits_of=None) -> dict[str, float]:
    """Top-1 test accuracy of the model's own classifier."""
    ds = learner.dataset
    fn = logits_of(model) if logits_of is not None else model
    return {"test_acc": accuracy(fn, ds.x_test, ds.y_test, ds.mean, ds.std, learner.ctx.device)}
