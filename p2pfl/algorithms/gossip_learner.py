"""Peers that train locally and gossip their model's parameters: the base of every weight-mixing method.

A method supplies its network (`make_model`), its loss (`local_loss`), optional hooks around a
peer's local round (from `LocalTrainer`), and how a model is scored (`score`). Here, once: the run's dataset and
partition, the common initialisation, gossip of the mixable state (FedBN aware), the network average, per-peer
evaluation and the weight drift.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from p2pfl.algorithms.distinct import plan_scoring, scoring_record, state_digest
from p2pfl.algorithms.peer import Peer, derived
from p2pfl.algorithms.trainer import LocalTrainer
from p2pfl.capabilities import GIVES_GRADIENTS, HANDS_OVER, HOLDS_OUT, MIXES_BY_W
from p2pfl.context import RunContext
from p2pfl.data import ImageDataset, PeerData, SimCLRAugment, simclr_crop_scale
from p2pfl.data.workload import Workload, load_workload
from p2pfl.evaluation import weight_drift
from p2pfl.gossip import exact_mean
from p2pfl.gossip.schemes.base import NO_REJOIN_MIX, PLAIN_MIX, UPDATED_ONLY
from p2pfl.heterogeneity import Loss, at_average
from p2pfl.method import ASYNCHRONOUS, LocalRound, Phase
from p2pfl.models import MixableState, init_model
from p2pfl.models.stacked import PeerStack
from p2pfl.network import RoundNetwork
from p2pfl.records import PEERS_SCORED, UNTRAINED, ScoringRecord
from p2pfl.seeding import SHARED, torch_generator

#: Metrics of an encoder's representation (scoring.representation_scores): each is also reported for the
#: untrained encoder (`<metric>_untrained`), and the summary gives the gain.
REPRESENTATION_METRICS = ("probe_acc", "knn_acc")
#: Of those, what `score` gives the network average alone (peer None): the kNN monitor.
AVERAGE_ONLY = frozenset({"knn_acc"})


@dataclass(eq=False)
class GossipPeer(Peer):
    """A peer whose model is mixed: views of its mixable and full state, and the message buffer; the state its
    --gossip scheme keeps across rounds (p2pfl.gossip.schemes: trackers, last model and G; checkpointed) and,
    inside a round, the mixable state its local update started from."""

    mixable: MixableState = derived()
    full: MixableState = derived()
    buffer: torch.Tensor = derived()
    scheme: dict[str, torch.Tensor] = field(default_factory=dict)
    start: torch.Tensor = derived()


class GossipLearner(LocalTrainer):
    """Local training plus gossip of the model's mixable state (SPEC §2)."""

    record: ClassVar[type[Peer]] = GossipPeer
    peers: dict[int, GossipPeer]
    #: It mixes its mixable state by W (so every --gossip scheme and --compress apply), hands a scheme its local
    #: update as G, and averages that state pairwise under --mode async.
    capabilities = frozenset({MIXES_BY_W, GIVES_GRADIENTS, ASYNCHRONOUS, HOLDS_OUT, HANDS_OVER})

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.work: Workload | None = None
        self._untrained: dict[bool, dict[str, float]] = {}  # untrained_scores, once per kind of evaluation
        self._scoring: ScoringRecord | None = None  # what the final evaluation scored

    # ------------------------------------------------------------------ what a method supplies
    def make_model(self) -> nn.Module:
        """The method's network, uninitialised."""
        raise NotImplementedError

    #: Whether `score` reports REPRESENTATION_METRICS (then the untrained encoder is scored as their baseline).
    scores_representations = False

    #: Whether `score(model, peer, final)` of a peer's model depends on the model alone, not on which peer holds
    #: it: then bitwise identical models are scored once (p2pfl.algorithms.distinct). A method that scores a
    #: peer on its own data sets it False.
    scores_by_model: ClassVar[bool] = True

    def score(self, model: nn.Module, peer: int | None, final: bool) -> dict[str, float]:
        """Metrics of one model (a peer's, or the network average when peer is None)."""
        return {}

    def as_peer(self, average: dict[str, float]) -> dict[str, float]:
        """What `score` gives a peer holding the network average's model, from the average's own scores: the
        same, less what it gives the average alone (AVERAGE_ONLY, for a method that scores representations)."""
        alone = AVERAGE_ONLY if self.scores_representations else frozenset()
        return {k: v for k, v in average.items() if k not in alone}

    def zeta2_loss(self) -> Loss | None:
        """The supervised loss (model, normalised inputs, targets) whose gradients at the network average give
        ζ² (p2pfl.heterogeneity); None: not measured (the self-supervised methods)."""
        return None

    def score_stacked(self, stacked: nn.Module, stack: PeerStack, peers: list[int], final: bool
                      ) -> list[dict[str, float]] | None:
        """`score` of several peers' models at once (stacked in `stack` in the order of `peers`, run through
        the peer-stacked module `stacked`); None when the method scores peer by peer."""
        return None

    def score_peers(self, peers: list[int], final: bool) -> dict[int, dict[str, float]]:
        """The metrics of the given local peers: peer-stacked, a chunk at a time, when this rank batches its
        peers (--batch-peers) and the method can; else one by one."""
        out: dict[int, dict[str, float]] = {}
        if self.batched is not None and len(peers) > 1:
            chunk = self.batched.chunk
            for i in range(0, len(peers), chunk):
                part = peers[i:i + chunk]
                stack = PeerStack([self.peers[p].model for p in part])
                scores = self.score_stacked(self.batched.stacked, stack, part, final)
                if scores is None:
                    break
                out.update(zip(part, scores))
        for p in peers:
            if p not in out:
                model = self.peers[p].model
                model.eval()
                out[p] = self.score(model, p, final)
        return out

    # ------------------------------------------------------------------ set-up
    @property
    def dataset(self) -> ImageDataset:
        assert self.work is not None, "set up first"
        return self.work.dataset

    def augmentation(self) -> str | None:
        """"none" for feature vectors and token sequences; SimCLR's views where the method draws them (`augment`,
        as dec-ssl and dec-sl's --sl-augment simclr do), mirrored where the dataset allows; else None."""
        ds = self.dataset
        if ds.features or ds.tokens or ds.sequence_labels:
            return "none"
        if isinstance(getattr(self, "augment", None), SimCLRAugment):
            return "simclr views (crop, colour jitter, grey" + (", flip)" if ds.transform.flip else "; no flip)")
        return None

    def crop_flip(self) -> str:
        """The supervised random crop and horizontal flip (p2pfl.data.supervised_apply) in words: "crop+flip", or
        "crop (no flip)" where the dataset's images are not mirrored (femnist:, --no-flip)."""
        ds = self.dataset
        if ds.features or ds.tokens or ds.sequence_labels:
            return "none"
        return "crop+flip" if ds.transform.flip else "crop (no flip)"

    def simclr_augment(self) -> SimCLRAugment:
        """SimCLR's views for this run's images (SPEC §4), with the --crop-scale for their size, mirrored where the
        dataset's images allow it."""
        size, ds = self.work.image_size, self.dataset
        return SimCLRAugment(size, self.work.channels, ds.mean, ds.std,
                             scale=(simclr_crop_scale(self.cfg.crop_scale, size), 1.0), flip_p=ds.transform.flip_p)

    def load_data(self) -> None:
        self.work = load_workload(self.cfg, self.ctx.n_peers, self.ctx.world)
        self.ctx.record_manifest(**self.work.manifest)

    def shard(self, peer: int) -> PeerData:
        assert self.work is not None
        return self.work.shard(peer, self.ctx.device)

    def build_model(self, peer: int) -> nn.Module:
        return self.new_model()

    def new_model(self) -> nn.Module:
        """A model with the common initialisation every peer starts from (stream (seed, SHARED, 'init'))."""
        model = self.make_model()
        init_model(model, torch_generator(self.cfg.seed, SHARED, "init"))
        return model.to(self.ctx.device)

    def init_peer(self, peer: GossipPeer) -> None:
        peer.mixable = MixableState(peer.model, fedbn=self.cfg.fedbn)
        peer.full = MixableState(peer.model)
        peer.buffer = peer.mixable.new_buffer()

    def setup(self) -> None:
        super().setup()
        first = self.peers[self.ctx.local_peers[0]]
        encoder = getattr(first.model, "encoder", None)
        counts = {}
        if isinstance(encoder, nn.Module):  # what --model gave, and what the method put around it
            counts["encoder_parameters"] = sum(t.numel() for t in encoder.parameters())
            counts["head_parameters"] = (sum(t.numel() for t in first.model.parameters())
                                         - counts["encoder_parameters"])
        self.ctx.record_manifest(model={"name": self.cfg.model, "parameters": first.full.numel, **counts,
                                        "mixed_per_message": first.mixable.numel})

    # ------------------------------------------------------------------ communication
    def mix_sizes(self) -> list[float] | None:
        """Shard sizes when mixing weights are scaled by data (--weight-by-data), else None."""
        if not self.cfg.weight_by_data:
            return None
        assert self.work is not None
        return self.work.sizes()

    def active_vectors(self, net: RoundNetwork) -> dict[int, torch.Tensor]:
        """The mixable state of the local active peers, flattened into their message buffers."""
        return {p: peer.mixable.flatten(peer.buffer) for p, peer in self.peers.items() if p in net.active}

    def local_updates(self, peers: list[int], round: int, net: RoundNetwork) -> LocalRound:
        """The local rounds; under a --gossip scheme that reads x and G, each peer's mixable state before it first
        (the X its G is measured from)."""
        if self.communicates and not self.ctx.scheme.capabilities & {PLAIN_MIX, UPDATED_ONLY}:
            for p in peers:
                peer = self.peers[p]
                peer.start = peer.mixable.flatten()
        return super().local_updates(peers, round, net)

    def communicate(self, round: int, net: RoundNetwork) -> Phase | None:
        if not self.communicates:
            return None
        if PLAIN_MIX not in self.ctx.scheme.capabilities or self.cfg.gossip_steps > 1:
            return self.communicate_scheme(round, net)
        mixed = self.ctx.gossip.mix(self.active_vectors(net), net, round, self.mix_sizes(), self.attack_memory)
        for p, vec in mixed.vectors.items():
            self.peers[p].mixable.unflatten_(vec)
        return Phase(events=mixed.events)

    def communicate_scheme(self, round: int, net: RoundNetwork) -> Phase:
        """The round of the --gossip scheme (SPEC §7) on the mixable state: G = (x − x_E)/η, x the state before
        the local update, x_E after it, η the round's learning rate. The models are what the peers hold
        (`Scheme.round_models`: push-sum's z = x/w); state that is not mixable (FedBN's) stays the peer's own. The
        plain mix too under --gossip-steps S > 1 (its round then repeats S times; G = 0, as it reads only x½)."""
        scheme = self.ctx.scheme
        lr = self.lr_at(round)
        after = self.active_vectors(net)
        # a scheme that reads only x½ = x_E gets it as it is (G = 0), not rebuilt from G
        start = after if scheme.capabilities & {UPDATED_ONLY, PLAIN_MIX} else {p: self.peers[p].start for p in after}
        mixed = scheme.round_models(self.ctx.gossip, start, {p: (start[p] - v) / lr for p, v in after.items()}, lr,
                                    {p: self.peers[p].scheme for p in after}, net, round, self.mix_sizes(),
                                    self.cfg.gossip_steps)
        for p, vec in mixed.vectors.items():
            self.peers[p].mixable.unflatten_(vec)
        return Phase(events=mixed.events)

    def rejoin(self, round: int, net: RoundNetwork) -> Phase | None:
        """--rejoin mix: a peer back from sitting out first takes its fresh neighbours' mix (Gossip.pull) and
        trains from there, as a FedAvg client starts from the current global model. Not under a scheme that
        forbids it (push-sum: a pull would replace the peer's z while its w stays, creating or destroying mass; its
        peer goes on from its own z, and the column-stochastic mixing brings it back to the network's mean)."""
        if (not self.communicates or self.cfg.rejoin != "mix" or not net.rejoining
                or NO_REJOIN_MIX in self.ctx.scheme.capabilities):
            return None
        mixed = self.ctx.gossip.pull(self.active_vectors(net), net, round, net.rejoining, self.mix_sizes())
        for p, vec in mixed.vectors.items():
            self.peers[p].mixable.unflatten_(vec)
        return Phase(events=mixed.events)

    def consensus_vectors(self) -> dict[int, torch.Tensor]:
        return {p: peer.mixable.flatten(peer.buffer) for p, peer in self.peers.items()}

    def async_vector(self, peer: int) -> torch.Tensor:
        return self.peers[peer].mixable.flatten()

    def carried(self, peer: int) -> torch.Tensor:
        """The mixable state, what gossip carries (FedBN's BatchNorm layers stay the peer's own)."""
        return self.peers[peer].mixable.flatten(self.peers[peer].buffer)

    def carry(self, peer: int, vector: torch.Tensor) -> None:
        self.peers[peer].mixable.unflatten_(vector)

    def load_async_vector(self, peer: int, vector: torch.Tensor) -> None:
        self.peers[peer].mixable.unflatten_(vector)

    def mixed_vector(self) -> tuple[int, torch.dtype]:
        first = self.peers[self.ctx.local_peers[0]].mixable
        return first.numel, first.dtype

    def mixed_layout(self) -> list[int]:
        return list(self.peers[self.ctx.local_peers[0]].mixable.sizes)

    # ------------------------------------------------------------------ evaluation
    def average_model(self, net: RoundNetwork) -> nn.Module:
        """The network average x̄ of the full states (BatchNorm included) of the peers alive in `net`;
        collective."""
        alive = self.alive_peers(net)
        like = self.peers[self.ctx.local_peers[0]].full.flatten()
        mean = exact_mean(self.ctx.world, {p: self.peers[p].full.flatten() for p in alive}, len(self.evaluated(net)),
                          like=like)
        model = self.new_model()
        state = MixableState(model)
        state.unflatten_(mean.to(state.dtype).to(self.ctx.device))
        return model

    def evaluate(self, round: int, final: bool, net: RoundNetwork
                 ) -> tuple[dict[str, float], dict[int, dict[str, float]]]:
        avg = self.average_model(net)
        avg.eval()
        zeta2 = at_average(self, avg, net, final)  # collective, before any rank goes its own way
        # The evaluation's one exchange comes before the root's scoring of the average, so that no rank waits
        # on the root (and its receive timeout) while the root probes; the ranks meet again only after scoring.
        between = self.neighbour_drift(round, net) if self.peers_scored(final) and self.cfg.eval_peers != 0 else {}
        metrics: dict[str, float] = {}
        scores: dict[str, float] = {}
        if self.ctx.world.is_root:
            scores = self.score(avg, None, final)
            metrics = {f"{k}_avg": v for k, v in scores.items()}
            if zeta2 is not None:
                metrics["zeta2_avg"] = zeta2
        baseline = self.baseline_here(final)
        per_peer = self.final_peer_scores(metrics, between, net, lambda p: avg, averages=[(avg, scores)],
                                          final=final) if self.peers_scored(final) else {}
        self.report_baseline(metrics, baseline)
        return metrics, per_peer

    @property
    def baseline_rank(self) -> int:
        """The rank that scores the untrained encoder: the last, so that it works while the root scores the
        network average (the root alone when the job has one rank)."""
        return self.ctx.world.size - 1

    def baseline_here(self, final: bool) -> dict[str, float] | None:
        """The untrained encoder's scores on the baseline rank, None elsewhere."""
        here = self.scores_representations and self.ctx.world.rank == self.baseline_rank
        return self.untrained_scores(final) if here else None

    def report_baseline(self, metrics: dict[str, float], baseline: dict[str, float] | None) -> None:
        """Bring the baseline rank's untrained scores to the root's `metrics` as `<metric>_untrained`; collective
        (after every rank's own scoring, so no rank idles at it while others score)."""
        baseline = self.ctx.world.bcast(baseline, root=self.baseline_rank)
        if self.ctx.world.is_root:
            metrics.update({k + UNTRAINED: v for k, v in (baseline or {}).items()})

    def peers_scored(self, final: bool) -> bool:
        """Whether this evaluation scores the peers' own models: the final one, or every one with --peer-scores
        every."""
        return final or self.cfg.peer_scores == "every"

    def final_peer_scores(self, metrics: dict[str, float], between: dict[int, float], net: RoundNetwork,
                          reference: Callable[[int], nn.Module],
                          extra: Callable[[int], dict[str, float]] | None = None,
                          averages: Sequence[tuple[nn.Module, dict[str, float]]] = (),
                          final: bool = True) -> dict[int, dict[str, float]]:
        """The scores of the local peers in the --eval-peers sample (as the `final` evaluation scores them, or an
        earlier one), each with its drift to its reference model (the network average) and to its neighbours and
        the method's `extra` entries; the root's `metrics` get `peers_scored`. `averages`: the network averages the
        root has scored (every rank holds the models; the scores are the root's), whose scores a peer holding one
        of them reports. Collective."""
        sample = self.eval_sample(net)
        if self.ctx.world.is_root:
            metrics[PEERS_SCORED] = float(len(sample))
        scored = [p for p in self.alive_peers(net) if p in sample]
        return {p: {**scores, **(extra(p) if extra else {}),
                    "drift_to_avg": weight_drift(self.peers[p].model, reference(p)), "drift_to_neighbours": between[p]}
                for p, scores in self.score_distinct(scored, averages, final).items()}

    def score_distinct(self, peers: list[int], averages: Sequence[tuple[nn.Module, dict[str, float]]] = (),
                       final: bool = True) -> dict[int, dict[str, float]]:
        """`score_peers(peers, final)` of the local `peers`, each distinct model among them scored once
        (p2pfl.algorithms.distinct): the lowest peer holding it scores it, and on the root a peer holding one of
        the `averages` it scored reports their scores (`as_peer`). Collective (one gather, to the root, of what
        each rank scored: the manifest's and summary's `scoring`)."""
        world = self.ctx.world
        if not self.scores_by_model:
            out = self.score_peers(peers, final)
            self.record_scoring(len(peers), [b""] * len(peers), [b""] * len(averages), by_digest=False)
            return out
        mine = {p: state_digest(self.peers[p].model) for p in peers}
        known = [state_digest(model) for model, _ in averages] if world.is_root else []
        plan = plan_scoring(mine, known)
        scores = self.score_peers(plan.scorers, final)
        out = {p: dict(scores[plan.source[p]]) if p in plan.source else self.as_peer(averages[plan.known[p]][1])
               for p in peers}
        self.record_scoring(len(plan.scorers), list(mine.values()), known)
        return out

    def record_scoring(self, models: int, digests: list[bytes], known: list[bytes], by_digest: bool = True) -> None:
        """Gather what each rank scored (`models`, its peers' `digests`) to the root, which records it with the
        `known` models it scored first: manifest["scoring"], summary["scoring"]. Collective."""
        parts = self.ctx.world.gather((models, digests))
        if parts is not None:
            self._scoring = scoring_record(parts, known, by_digest)
            self.ctx.record_manifest(scoring=dict(self._scoring))

    def untrained_scores(self, final: bool) -> dict[str, float]:
        """The representation metrics (REPRESENTATION_METRICS) of the untrained encoder, the common
        initialisation every peer starts from: the baseline a trained encoder must beat. Computed the first time
        an evaluation of its kind (final or not) asks, then reused (the initialisation and the probe's stream are
        fixed, so a resumed run computes the same values again)."""
        if final not in self._untrained:
            model = self.new_model()
            model.eval()
            fresh = self.score(model, None, final)
            self._untrained[final] = {k: v for k, v in fresh.items() if k in REPRESENTATION_METRICS}
        return self._untrained[final]

    def summary(self) -> dict[str, Any]:
        """The local trainer's entries and `scoring`: what the final evaluation scored (records.ScoringRecord)."""
        out = super().summary()
        return out if self._scoring is None else {**out, "scoring": dict(self._scoring)}

    def summary_lines(self, summary) -> list[str]:
        """The gain of the network average over the untrained encoder, per representation metric."""
        final = summary["final"]
        gains = [f"{k}: {final[f'{k}_avg']:.4f} vs {final[f'{k}_untrained']:.4f} untrained "
                 f"(gain {100 * (final[f'{k}_avg'] - final[f'{k}_untrained']):+.1f} points)"
                 for k in REPRESENTATION_METRICS if f"{k}_avg" in final and f"{k}_untrained" in final]
        return [*super().summary_lines(summary), *gains]

    def neighbour_drift(self, round: int, net: RoundNetwork) -> dict[int, float]:
        """Mean d_w between each local peer alive in `net` and its alive neighbours in the support graph (one
        extra exchange of full states)."""
        vectors = {p: self.peers[p].full.flatten() for p in self.alive_peers(net)}
        links = self.ctx.transport.all_links(self.evaluated(net))
        delivered = self.ctx.gossip.exchanges(None, round).start(vectors, links).result()
        out = {}
        for p in delivered.inbox:
            state = self.peers[p].full
            params = [n for n, _ in self.peers[p].model.named_parameters()]  # in order: the drift sums over it
            mine = dict(zip(state.names, vectors[p].split(state.sizes)))
            drifts = []
            for theirs_flat in delivered.kept(p).values():
                theirs = dict(zip(state.names, theirs_flat.split(state.sizes)))
                drifts.append(weight_drift({n: mine[n] for n in params}, {n: theirs[n] for n in params}))
            out[p] = sum(drifts) / len(drifts) if drifts else 0.0
        delivered.release()
        return out
