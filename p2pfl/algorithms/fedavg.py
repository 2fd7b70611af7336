"""MOON's baselines, decentralised (SPEC §5): FedAvg, FedProx, SCAFFOLD and SOLO.

All of them train MOON's network (`MoonNet`: encoder → projection head → classifier on the projection
output), as the MOON paper does for every method, with cross-entropy on the classifier's logits, and are
scored by top-1 test accuracy. They differ only in what they add to the local step and what they exchange:

- fedavg: gossip of the trained models. On `--topology complete --mixing uniform` one gossip step is the
  exact average of the peers' models, i.e. FedAvg (with `--weight-by-data`: the sample-count-weighted FedAvg
  of MOON's code).
- fedprox: + (mu/2)·‖w − w_start‖² over the trainable parameters, w_start the model the peer started the round
  with (its neighbourhood mix). `--mu` defaults to 0.01 for fedprox (the MOON paper's CIFAR-10 value); the
  MOON default of 5 applies to `--algorithm moon` only.
- scaffold: control variates (option II of the SCAFFOLD paper). Each peer keeps c_i; the server's c is played
  by the neighbourhood mix of the peers' c_j (a second gossip message per round, exchange kind "control").
- solo: local training only, no communication at all.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from p2pfl.algorithms.gossip_learner import GossipLearner, GossipPeer
from p2pfl.algorithms.local_batch import PeerBatch, StepLoss
from p2pfl.algorithms.peer import Peer, derived
from p2pfl.algorithms.scoring import classifier_scores, classifier_scores_stacked, next_token, token_scores
from p2pfl.algorithms.trainer import OneBatch
from p2pfl.capabilities import FEATURES, MIXES_BY_W, PER_SAMPLE, SEQUENCE_LABELS, TOKENS
from p2pfl.data import supervised_apply, supervised_draw
from p2pfl.heterogeneity import Loss
from p2pfl.method import ASYNCHRONOUS, BATCHABLE, Phase
from p2pfl.models import MoonNet, build_encoder
from p2pfl.models.stacked import PeerStack
from p2pfl.network import RoundNetwork
from p2pfl.options import method_options, opt

MOON_PROJ_DIM = 256  # MOON's out_dim (the projection width of ModelFedCon), fixed as in the paper
#: --head's choices: MOON's projection head and a classifier on its output, or one Linear on the encoder.
HEADS = ("moon", "linear")
FEDPROX_MU = 0.01
#: The MOON paper's local training for every method it compares (SPEC §5, reference notes §A.5).
MOON_PAPER: dict[str, Any] = {"optimizer": "sgd", "lr": 0.01, "momentum": 0.9, "weight_decay": 1e-5,
                              "batch_size": 64}


@method_options("fedavg")
class HeadOptions:
    """What the fedavg family (fedavg, fedprox, scaffold, solo; moon: its own head only) puts on the encoder."""

    head: str = opt("moon", "the network on the encoder (--model): MOON's 2-layer projection head to 256 and a "
                            "classifier on its output (moon: as the MOON paper trains every method it compares), "
                            "or one Linear classifier on the encoder's features (linear: a plug-in model trained as "
                            "given, plus its classifier)", HEADS, section="training")


def _logits(model: nn.Module):
    """MoonNet.forward returns (h, z, logits); scoring wants logits only."""
    return lambda x: model(x)[2]


class FedAvg(GossipLearner):
    """MOON's network trained with cross-entropy and mixed by gossip of its whole state (BN statistics too)."""

    name = "fedavg"
    defaults = MOON_PAPER
    ignores = {**dict.fromkeys(("probe_epochs", "knn_k"), "it is scored by its own classifier: no linear probe, no "
                                                          "kNN monitor"),
               **dict.fromkeys(("sl_augment", "crop_scale"), "it trains on MOON's crop and flip")}
    # feature vectors: MoonNet on an mlp, no crop or flip; token sequences: MoonNet's head and classifier on every
    # position of a char-lstm's features, position t's logits predicting token t+1; labelled token sequences: the
    # model built with the padding id (its features at a sequence's last token), then MoonNet's head and classifier;
    # per-sample gradients (DP-SGD): cross-entropy (MOON's contrastive term too) is a mean of per-sample terms
    capabilities = frozenset({BATCHABLE, FEATURES, TOKENS, SEQUENCE_LABELS, PER_SAMPLE})

    def setup(self) -> None:
        super().setup()
        # MOON's CIFAR-10 recipe pads by reflection; torchvision's RandomCrop(32, padding=4) (CIFAR-100) by zeros.
        self.padding_mode = "reflect" if self.dataset.name == "cifar10" else "constant"

    def make_model(self) -> nn.Module:
        ds = self.dataset
        kw = {"padding": ds.padding} if ds.sequence_labels else {}
        encoder = build_encoder(self.cfg.model, self.work.channels, self.work.image_size, cfg=self.cfg, **kw)
        return MoonNet(encoder, self.dataset.num_classes, proj_dim=MOON_PROJ_DIM if self.cfg.head == "moon" else None)

    def augmentation(self) -> str:
        """MOON's crop and flip (none for feature vectors and token sequences)."""
        return self.crop_flip()

    def draw(self, peer: GossipPeer, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return supervised_draw(x, peer.augment_rng)

    def apply(self, x: torch.Tensor, draws: dict[str, torch.Tensor]) -> torch.Tensor:
        """MOON's supervised transform (random crop padded by an eighth of the side, flip, normalise), uint8 in; the
        flip and the padding's fill as the dataset's images allow (FEMNIST: no flip, white paper)."""
        ds = self.dataset
        return supervised_apply(x, draws, ds.mean, ds.std, padding_mode=self.padding_mode,
                                flip_p=ds.transform.flip_p, fill=ds.transform.fill)

    def criterion(self, out: tuple[torch.Tensor, ...], y: torch.Tensor, refs: list
                  ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Cross-entropy of MoonNet's logits (methods add their terms here); of every position's logits against
        the next tokens for token sequences (B×T×V logits, B×T targets)."""
        return F.cross_entropy(out[2].flatten(0, -2), y.flatten()), {}

    def local_loss(self, batch: PeerBatch) -> StepLoss:
        """The default loss; on token sequences the model reads all tokens but the last and each position's target
        is the token after it (the sequence's label is not used)."""
        if not self.dataset.tokens:
            return super().local_loss(batch)
        inputs, targets = next_token(batch.augment(self.draw, self.apply))
        return batch.model_loss(inputs, lambda out, y, refs: self.criterion(out, targets, refs),
                                self.penalty if self.penalized else None)

    def zeta2_loss(self) -> Loss:
        """Cross-entropy of MoonNet's logits, the data term every MOON baseline shares (ζ², p2pfl.heterogeneity)."""
        if self.dataset.tokens:
            return lambda model, x, y: self.criterion(model(next_token(x)[0]), next_token(x)[1], [])[0]
        return lambda model, x, y: F.cross_entropy(model(x)[2], y)

    def loss(self, peer: GossipPeer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The local loss on an already augmented, normalised batch (MOON's and FedProx's terms included)."""
        batch = OneBatch(peer, x, y, self.references(peer))
        return batch.model_loss(x, self.criterion, self.penalty if self.penalized else None)[0]

    def score(self, model: nn.Module, peer: int | None, final: bool) -> dict[str, float]:
        if self.dataset.tokens:
            return token_scores(self, model, logits_of=_logits)
        return classifier_scores(self, model, logits_of=_logits)

    def score_stacked(self, stacked: nn.Module, stack: PeerStack, peers: list[int], final: bool
                      ) -> list[dict[str, float]] | None:
        if self.dataset.tokens or self.dataset.sequence_labels:
            return None  # peer by peer (`score`): the text models do not run peer-stacked
        return classifier_scores_stacked(self, stacked, stack, peers, select=lambda out: out[2])


class Solo(FedAvg):
    """Each peer trains MOON's network alone on its shard (MOON's SOLO baseline): no communication."""

    name = "solo"
    communicates = False
    lacks = {ASYNCHRONOUS: "its peers never communicate", MIXES_BY_W: "its peers never communicate"}


@dataclass(eq=False)
class FedProxPeer(GossipPeer):
    """w_start: the trainable parameters the peer started the round with."""

    start: list[torch.Tensor] = derived()


class FedProx(FedAvg):
    """FedAvg plus the proximal term (mu/2)·Σ‖w − w_start‖² over the trainable parameters (MOON's code)."""

    name = "fedprox"
    defaults = {**MOON_PAPER, "mu": FEDPROX_MU}
    borrows = frozenset({"mu"})  # the proximal weight, in moon's section
    record: ClassVar[type[Peer]] = FedProxPeer

    @property
    def penalized(self) -> bool:  # the plain cross-entropy when mu is 0
        return self.cfg.mu != 0.0

    def before_local(self, peer: FedProxPeer, round: int) -> None:
        params = self.trainable(peer.model)
        if peer.start is None:
            peer.start = [torch.empty_like(p) for p in params]
        with torch.no_grad():
            for p0, p in zip(peer.start, params):
                p0.copy_(p)

    def penalty(self, params: list[torch.Tensor], start: list[torch.Tensor]) -> torch.Tensor:
        prox = sum((p - p0).pow(2).flatten(1).sum(1) for p, p0 in zip(params, start))
        return 0.5 * self.cfg.mu * prox


@dataclass(eq=False)
class ScaffoldPeer(GossipPeer):
    """SCAFFOLD's control variates c_i (c_local) and c (c_mix, the neighbourhood mix of the c_j); inside a
    round the parameters it started from and the correction c − c_i in the parameters' shapes."""

    c_local: torch.Tensor = None
    c_mix: torch.Tensor = None
    w_start: torch.Tensor = derived()
    correction: list[torch.Tensor] | None = derived()


class Scaffold(FedAvg):
    """SCAFFOLD with option-II control variates, decentralised.

    Local step: after each optimiser step on the cross-entropy gradient g, w ← w − lr·(c − c_i). With plain SGD
    this is exactly the step along g + c − c_i (weight decay included); with momentum the correction bypasses
    the momentum buffer, as in NIID-Bench's SCAFFOLD (the code MOON's authors point to). Then c_i, measured
    from the displacement, estimates g/(1 − momentum) and the correction stays on the scale of the gradient
    steps; feeding c − c_i through the momentum buffer instead over-corrects by 1/(1 − momentum) and diverges
    (CIFAR-10, momentum 0.9: NaN by round 4). After K local steps at learning rate lr:
        c_i⁺ = c_i − c + (w_start − w) / (K·lr).
    Communication: the model is gossiped as in fedavg (data-size weighted under --weight-by-data), then the
    peers gossip their c_i⁺ with the topology's weights W (never data-size weighted: SCAFFOLD's server averages
    control variates uniformly) and each peer uses the mix Σ_j W_ij c_j⁺ as its c in the next round. On
    complete/uniform with full participation this mix is the mean of all c_i, i.e. SCAFFOLD's server c.
    The control variates cover the trainable parameters (not BN running statistics); c and c_i start at zero.
    """

    name = "scaffold"
    record: ClassVar[type[Peer]] = ScaffoldPeer
    lacks = {ASYNCHRONOUS: "its control variates travel as a second message, outside the pairwise mean",
             BATCHABLE: "its correction runs after every optimiser step of each peer",
             MIXES_BY_W: "its control variates travel as a second message, mixed by the plain average uncompressed"}
    allowed = {"optimizer": ("sgd",)}  # the correction w -= lr·(c − c_i) is a plain SGD step (docstring above)

    def init_peer(self, peer: ScaffoldPeer) -> None:
        super().init_peer(peer)
        n = sum(p.numel() for p in self.trainable(peer.model))
        peer.c_local = torch.zeros(n, device=self.ctx.device)
        peer.c_mix = torch.zeros(n, device=self.ctx.device)
        peer.w_start = torch.empty(n, device=self.ctx.device)
        peer.optimizer.register_step_post_hook(lambda opt, args, kwargs: self._correct(peer, opt))

    def flat_params(self, peer: ScaffoldPeer, out: torch.Tensor | None = None) -> torch.Tensor:
        """The trainable parameters as one vector of the run's dtype (the layout of the control variates)."""
        params = [p.detach().reshape(-1).to(torch.get_default_dtype()) for p in self.trainable(peer.model)]
        if out is None:
            return torch.cat(params)
        return torch.cat(params, out=out)

    def before_local(self, peer: ScaffoldPeer, round: int) -> None:
        self.flat_params(peer, out=peer.w_start)
        diff = peer.c_mix - peer.c_local
        params = self.trainable(peer.model)
        peer.correction = [d.view_as(p) for d, p in zip(diff.split([p.numel() for p in params]), params)]

    @torch.no_grad()
    def _correct(self, peer: ScaffoldPeer, opt: torch.optim.Optimizer) -> None:
        """w ← w − lr·(c − c_i) for every trainable parameter (after each optimiser step of the local phase)."""
        if peer.correction is None:
            return
        lr = opt.param_groups[0]["lr"]
        for p, d in zip(self.trainable(peer.model), peer.correction):
            p.add_(d, alpha=-lr)

    def after_local(self, peer: ScaffoldPeer, round: int, steps: int) -> None:
        """c_i⁺ from the accepted update's displacement (a peer rolled back as non-finite keeps its c_i)."""
        lr = self.lr_at(round)
        w = self.flat_params(peer)
        peer.c_local = peer.c_local - peer.c_mix + (peer.w_start - w) / (steps * lr)
        peer.correction = None

    def communicate(self, round: int, net: RoundNetwork) -> Phase | None:
        params = super().communicate(round, net) or Phase()
        controls = {p: peer.c_local for p, peer in self.peers.items() if p in net.active}
        mixed = self.ctx.gossip.mix(controls, net, round, memory=lambda p: self.attack_memory(p, "control"))
        for p, vec in mixed.vectors.items():
            self.peers[p].c_mix = vec
        return Phase(params.metrics, params.events + mixed.events)
