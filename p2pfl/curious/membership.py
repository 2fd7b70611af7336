"""Membership inference on the models curious peers receive: the loss-threshold attack (Yeom et al., CSF 2018) as
El Mrini et al. and Touat et al. (2024) run it on gossip. A curious peer holds the latest model each neighbour sent
it (the first message of the neighbour's latest round: the model it gossips after its local update, not a later
re-send of its mixed model such as the drift measurement's). At every evaluation the attack scores each such
victim's model on `--curious-samples` of the victim's own training samples (members) and as many test samples no
peer trains on, of the same labels (non-members, drawn class by class to match the members, so that a non-IID
shard's label skew is not mistaken for membership); a sample's score is minus its loss under the method's
supervised loss. Per victim: the exact Mann–Whitney AUC over all of them, and the accuracy of a threshold
calibrated on held-out data: the samples are split in halves, the threshold of best balanced accuracy on the first
half of members and non-members is applied to the second half. Recorded: the per-victim AUC and accuracy
(`per_peer`: curious_mia_auc, curious_mia_acc), their statistics over the victims (`curious_mia_auc_peer_mean`,
`_min`, `_max`, as every per-peer number has) and the number of victims scored (`curious_mia_victims`).

The samples are drawn from (seed, victim, "curious/members") and (seed, victim, "curious/non-members"), and the
whole received vector is loaded into a copy of a model, so nothing depends on which rank computes it; the copies
and their forward passes touch no random state of the run.
"""
from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch

from p2pfl.capabilities import GIVES_GRADIENTS, MIXES_BY_W
from p2pfl.curious import CURIOUS, CuriousAttack, Inbox
from p2pfl.curious.auc import accuracy, auc, threshold
from p2pfl.data import normalize
from p2pfl.models.params import MixableState
from p2pfl.network import RoundNetwork
from p2pfl.options import Check, catalogue, opt
from p2pfl.seeding import numpy_rng


@CURIOUS.register("membership")
class Membership(CuriousAttack):
    """Loss-threshold membership inference on every model a curious peer receives from a neighbour."""

    paper = "Yeom et al. 2018; El Mrini, Cyffers, Bellet, ICML 2024; Touat et al. 2024"

    class Options:
        curious_samples: int = opt(64, "membership: members and as many non-members scored per victim (at most "
                                       "its shard): bounds the attack's cost", section="curious", bounds=">= 2")

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        """A supervised method whose whole model travels: it mixes trained models by W, none of it kept local."""
        super().check(cfg, check)
        if cfg.curious is None:
            return
        method = catalogue().get(cfg.algorithm, cfg)
        check(method.can(MIXES_BY_W) and method.can(GIVES_GRADIENTS) and hasattr(method, "zeta2_loss"),
              "curious_attack", f"membership scores received models of a trained method, not {cfg.algorithm}")
        check(cfg.fedbn == "off", "curious_attack", "membership loads the whole received model: not with --fedbn")

    def __init__(self, ctx: Any, algorithm: Any, curious: frozenset[int], options: Any) -> None:
        super().__init__(ctx, algorithm, curious, options)
        loss = algorithm.zeta2_loss()
        if loss is None:
            raise ValueError(f"--curious-attack membership: {ctx.cfg.algorithm} has no supervised loss to score")
        self.loss = loss
        self.latest: dict[int, tuple[int, torch.Tensor]] = {}  # victim -> (round, the model a curious peer got)
        local = sorted(curious.intersection(ctx.local_peers))
        self.model = copy.deepcopy(algorithm.peers[local[0]].model) if local else None
        self.state = MixableState(self.model) if self.model is not None else None

    def observe(self, round: int, inbox: Inbox) -> None:
        if self.state is None:
            return
        for receiver in sorted(self.curious.intersection(inbox)):
            for sender, message in inbox[receiver].items():
                kept = self.latest.get(sender)
                if (sender not in self.curious and message.numel() == self.state.numel
                        and (kept is None or kept[0] < round)):  # a round's first: its gossip, not a re-send
                    self.latest[sender] = (round, message.detach().clone())

    def evaluate(self, round: int, final: bool, net: RoundNetwork) -> tuple[dict[str, float], dict]:
        mine = {v: self.attack(v, vector) for v, (_, vector) in sorted(self.latest.items())}
        self.latest = {}
        parts = self.ctx.world.gather(mine)
        if parts is None:
            return {}, {}
        victims = {v: s for part in parts for v, s in part.items()}
        if not victims:
            return {"curious_mia_victims": 0.0}, {}
        return {"curious_mia_victims": float(len(victims))}, victims  # their means: curious_mia_*_peer_mean

    @torch.no_grad()
    def attack(self, victim: int, vector: torch.Tensor) -> dict[str, float]:
        """The AUC and calibrated accuracy of the loss-threshold attack on the model `vector` of `victim`."""
        assert self.model is not None and self.state is not None
        self.state.unflatten_(vector)
        self.model.eval()
        ds = self.algorithm.dataset
        shard = self.algorithm.work.shard(victim, self.ctx.device)
        n = min(self.options.curious_samples, len(shard), int(ds.x_test.shape[0]))
        seed = self.ctx.cfg.seed
        inside = numpy_rng(seed, victim, "curious/members").choice(len(shard), n, replace=False)
        outside = matched(shard.y[torch.as_tensor(inside)].cpu().numpy(), ds.y_test.cpu().numpy(),
                          numpy_rng(seed, victim, "curious/non-members"))
        members = self.scores(shard.x[torch.as_tensor(inside)], shard.y[torch.as_tensor(inside)])
        others = self.scores(ds.x_test[torch.as_tensor(outside)], ds.y_test[torch.as_tensor(outside)])
        half = n // 2
        at = threshold(members[:half], others[:half])
        return {"curious_mia_auc": auc(members, others), "curious_mia_acc": accuracy(members[half:], others[half:], at)}

    def scores(self, x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
        """Minus the method's loss of each sample on its own (the attack's member-likeness)."""
        device = self.ctx.device
        xb = normalize(x.to(device), self.algorithm.dataset.mean, self.algorithm.dataset.std)
        yb = y.to(device)
        return np.array([-float(self.loss(self.model, xb[i:i + 1], yb[i:i + 1])) for i in range(xb.shape[0])])


def matched(labels: np.ndarray, pool: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Indices into `pool` (the test labels) with the labels of `labels`, in their order: the non-members follow
    the victim's own label distribution (under a non-IID partition a member's loss would otherwise tell its class,
    not its membership). Drawn without replacement where the class has enough test samples, else with."""
    out = np.empty(len(labels), dtype=np.int64)
    for c in np.unique(labels):
        where = np.flatnonzero(labels == c)
        have = np.flatnonzero(pool == c)
        if len(have) == 0:
            raise ValueError(f"--curious-attack membership: no test sample of class {c} to match the members")
        out[where] = rng.choice(have, len(where), replace=len(have) < len(where))
    return out
