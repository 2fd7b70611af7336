"""FeatARC, decentralised (SPEC §4; Dec-SSL paper Algorithms 1-2; reference notes §B.7): Dec-SSL with C cluster
models, feature-alignment clustering and an alignment regulariser, with the server's per-cluster average
replaced by a per-cluster mix over each peer's neighbourhood.

State of peer i: its view of every cluster model (`copies[k]`, k < C = --clusters), its cluster id, its model
(the copy of its cluster it trains and is scored by) and the unit features of its last trained model on its
own shard (the paper's local model θ̃_i, kept as features, which is all the clustering needs of it).

- Initialisation: cluster model k from the stream (seed, SHARED, 'init-cluster-k'), independently; peer i starts
  in cluster i mod C with its model = that cluster's.
- Assignment, before each local training: a_k = mean_x cos(f_k(x), f̃_i(x)) over the peer's un-augmented
  shard, f_k its copy of cluster k, f̃_i its last trained model; cluster(i) = argmax_k a_k, lowest k on ties.
  A peer that has not trained yet (round 1, or sat out so far) keeps its initial cluster i mod C. Comparing
  against the *trained* model (not the mixed copy the peer holds afterwards, which is copy[cluster] itself and
  would always align best with its own cluster) follows the paper's local-vs-cluster model distinction.
- Local training: the model := the copy of its cluster, trained on NT-Xent + lambda · alignment_regulariser
  (p2pfl.losses.featarc) against the frozen copy's backbone features of the un-augmented batch; lambda =
  --reg-scale. The projection head is Linear(F,F)-ReLU-Linear(F,F), F = encoder width (the regulariser needs
  projection width == feature width; --proj-dim is not used).
- Communication: one buffer per peer and round: its trained model's mixable state (FedBN aware) with its
  cluster id appended as one float. For every cluster k, S_k = the members of i's closed neighbourhood (itself
  and the neighbours whose message arrived and was accepted) in cluster k; copy_i[k] := Σ_{j∈S_k} W_ij x_j /
  Σ_{j∈S_k} W_ij, the round's mixing row restricted to S_k and renormalised (uniform over S_k on uniform
  weights, the reference's unweighted cluster average on a complete graph); copies with S_k empty are kept.
  Own cluster: the tensors left out of mixing (FedBN) come from the trained model. Then model := copy_i[c_i].
  A non-finite message, or one without a valid cluster id, is rejected as in p2pfl.gossip (the link fails for
  the round and the weights are recomputed).
- Evaluation: network averages of every cluster's copies (over the alive peers), each scored as Dec-SSL
  scores the average (kNN; linear probe at the end): `<metric>_cluster<k>`; `<metric>_avg` is the best
  cluster's value of that metric (the reference reports the best cluster model), `best_cluster` the index of
  the best (by the probe at the final evaluation, kNN otherwise); `cluster_size<k>` counts the evaluated peers
  in cluster k. Per peer as usual: its own model, drift to its cluster's average and to its neighbours.
  Rounds record each active peer's `cluster` and `alignment` (a_k of its cluster), and `cluster_frac<k>`
  (1 when in k: its round mean is the share of active peers in cluster k).

Not supported: --byzantine (robust aggregation of cluster-tagged messages), --mixing server (a star hub
would have to average per cluster for its leaves) and --rejoin mix (a returning peer trains from its own
copies, reassigned by alignment: --rejoin stale, this method's default).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from p2pfl.algorithms.dec_ssl import DecSSL
from p2pfl.algorithms.gossip_learner import GossipPeer
from p2pfl.algorithms.local_batch import PeerBatch, StepLoss
from p2pfl.algorithms.peer import ModelPool, Peer, derived
from p2pfl.capabilities import MIXES_BY_W
from p2pfl.data import normalize
from p2pfl.evaluation import features
from p2pfl.gossip import exact_mean, finite
from p2pfl.losses import nt_xent
from p2pfl.losses.featarc import alignment_regulariser, alignment_scores, assign_cluster
from p2pfl.method import ASYNCHRONOUS, BATCHABLE, LocalRound, Phase
from p2pfl.models import MixableState, SimCLRNet, build_encoder, init_model
from p2pfl.network import RoundNetwork
from p2pfl.options import method_options, opt
from p2pfl.records import BEST_CLUSTER
from p2pfl.seeding import SHARED, torch_generator


@dataclass(eq=False)
class FeatARCPeer(GossipPeer):
    """A FeatARC peer: its copies of the C cluster models (frozen, eval mode), its cluster, the unit features
    of its last trained model on its shard (0 rows before it first trains); views of the copies for mixing."""

    copies: nn.ModuleList = None
    cluster: int = 0
    own_features: torch.Tensor = None
    copy_mixable: list[MixableState] = derived()
    copy_full: list[MixableState] = derived()
    message: torch.Tensor = derived()


@method_options("dec-featarc")
class DecFeatARCOptions:
    """FeatARC's clusters and regulariser."""

    clusters: int = opt(2, "FeatARC: number of cluster models C", section="ssl", bounds=">= 1")
    reg_scale: float = opt(1.0, "FeatARC: weight lambda of the alignment regulariser", section="ssl", bounds=">= 0")


class DecFeatARC(DecSSL):
    """Feature Alignment + Regularisation + Clustering on a peer graph (module docstring)."""

    name = "dec-featarc"
    lacks = {ASYNCHRONOUS: "it mixes per cluster (mix_clusters), not one vector pairwise",
             BATCHABLE: "its per-peer anchors and clusters train peer by peer",
             MIXES_BY_W: "it mixes per cluster (mix_clusters), not one vector by W"}
    record: ClassVar[type[Peer]] = FeatARCPeer
    peers: dict[int, FeatARCPeer]
    defaults = {**DecSSL.defaults, "rejoin": "stale"}
    allowed = {"rejoin": ("stale",), "byzantine": (None,)}

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._cluster_states: dict[int, dict[str, torch.Tensor]] = {}

    # ------------------------------------------------------------------ models
    @property
    def n_clusters(self) -> int:
        return self.cfg.clusters

    def make_model(self) -> nn.Module:
        encoder = build_encoder(self.cfg.model, self.work.channels, self.work.image_size, cfg=self.cfg)
        return SimCLRNet(encoder, proj_dim=encoder.feat_dim)

    def cluster_state(self, k: int) -> dict[str, torch.Tensor]:
        """The initial state of cluster model k: stream (seed, SHARED, 'init-cluster-k'), drawn once."""
        if k not in self._cluster_states:
            model = self.make_model()
            init_model(model, torch_generator(self.cfg.seed, SHARED, f"init-cluster-{k}"))
            self._cluster_states[k] = {n: v.to(self.ctx.device) for n, v in model.state_dict().items()}
        return self._cluster_states[k]

    def build_model(self, peer: int) -> nn.Module:
        model = self.make_model().to(self.ctx.device)
        model.load_state_dict(self.cluster_state(peer % self.n_clusters))
        return model

    def init_peer(self, peer: FeatARCPeer) -> None:
        super().init_peer(peer)
        copies = []
        for k in range(self.n_clusters):
            copy = self.make_model().to(self.ctx.device)
            copy.load_state_dict(self.cluster_state(k))
            copies.append(ModelPool.frozen(copy))
        peer.copies = nn.ModuleList(copies)
        peer.cluster = peer.id % self.n_clusters
        peer.own_features = torch.zeros(0, device=self.ctx.device)
        peer.copy_mixable = [MixableState(c, fedbn=self.cfg.fedbn) for c in peer.copies]
        peer.copy_full = [MixableState(c) for c in peer.copies]
        peer.message = torch.empty(peer.mixable.numel + 1, dtype=peer.mixable.dtype, device=peer.mixable.device)

    def setup(self) -> None:
        if self.cfg.mixing == "server":
            raise ValueError("--algorithm dec-featarc: --mixing server is not supported (the hub would have to "
                             "average per cluster); use the star's gossip weights")
        super().setup()
        self._cluster_states.clear()  # only needed to build the peers
        first = self.peers[self.ctx.local_peers[0]]
        self.ctx.record_manifest(featarc={"clusters": self.n_clusters, "reg_scale": self.cfg.reg_scale,
                                          "proj_dim": first.model.encoder.feat_dim})

    # ------------------------------------------------------------------ assignment
    @torch.no_grad()
    def unit_features(self, model: nn.Module, peer: FeatARCPeer) -> torch.Tensor:
        """(N, F) L2-normalised backbone features of `model` (eval mode) on the peer's un-augmented shard."""
        model.eval()
        ds = self.dataset
        out = features(model.features, peer.data.x, ds.mean, ds.std, self.ctx.device)
        return torch.nn.functional.normalize(out, dim=1)

    def alignment(self, peer: FeatARCPeer) -> list[float]:
        """a_k for every cluster k: the peer's trained features against its copy of cluster k's."""
        return alignment_scores(peer.own_features, [self.unit_features(c, peer) for c in peer.copies])

    def assign(self, peer: FeatARCPeer) -> dict[str, float]:
        """Move the peer to its best aligned cluster (kept before it first trains) and start its model from
        that cluster's copy; returns the round metrics of the assignment."""
        out: dict[str, float] = {}
        if peer.own_features.shape[0] > 0:
            scores = self.alignment(peer)
            cluster = assign_cluster(scores)
            if cluster != peer.cluster:
                peer.optimizer.state.clear()  # --keep-optimizer: no moments of another cluster's model
            peer.cluster = cluster
            out["alignment"] = scores[cluster]
        peer.model.load_state_dict(peer.copies[peer.cluster].state_dict())
        out["cluster"] = float(peer.cluster)
        out.update({f"cluster_frac{k}": float(k == peer.cluster) for k in range(self.n_clusters)})
        return out

    def train_group(self, group: list[FeatARCPeer], round: int, net: RoundNetwork, out: LocalRound) -> None:
        """Assign, train the cluster's copy (rolled back to it if the update turns non-finite), then keep the
        trained model's features for the next assignment."""
        assigned = [self.assign(peer) for peer in group]
        super().train_group(group, round, net, out)
        for peer, metrics in zip(group, assigned):
            peer.own_features = self.unit_features(peer.model, peer)
            out.metrics[peer.id] = {**out.metrics[peer.id], **metrics}

    def rejoin(self, round: int, net: RoundNetwork) -> None:
        """Nothing: a returning peer reassigns itself from its own copies (--rejoin stale)."""

    # ------------------------------------------------------------------ the local loss
    def local_loss(self, batch: PeerBatch) -> StepLoss:
        """NT-Xent of the two views + lambda · the alignment regulariser against the frozen cluster copy."""
        peer, x, _ = batch.alone()
        _, z = peer.model(self.apply(x, self.draw(peer, x)))
        z1, z2 = z.chunk(2)
        ssl = nt_xent(z1, z2, temperature=self.cfg.temperature)
        with torch.no_grad():
            anchor = peer.copies[peer.cluster].features(normalize(x, self.dataset.mean, self.dataset.std))
        reg = alignment_regulariser(z1, z2, anchor)
        return ssl + self.cfg.reg_scale * reg, {"loss_ssl": ssl.detach(), "loss_reg": reg.detach()}

    # ------------------------------------------------------------------ communication
    def _cluster_of(self, message: torch.Tensor) -> int | None:
        """The cluster id a message carries, None when it is not finite or not a valid id."""
        if not finite(message):
            return None
        value = float(message[-1])
        k = int(value)
        return k if k == value and 0 <= k < self.n_clusters else None

    def communicate(self, round: int, net: RoundNetwork) -> Phase | None:
        if not self.communicates:
            return None
        vectors = {}
        for p, peer in self.peers.items():
            if p in net.active:
                peer.mixable.flatten(peer.message[:-1])
                peer.message[-1] = float(peer.cluster)
                vectors[p] = peer.message
        delivered = self.ctx.gossip.exchanges(net, round).start(
            vectors, valid=lambda v: self._cluster_of(v) is not None).result()
        assert delivered.net is not None
        sizes = self.mix_sizes()
        for p in delivered.inbox:
            self.mix_clusters(self.peers[p], vectors[p], delivered.kept(p), delivered.net.row(p, sizes))
        delivered.release()
        return Phase(events=delivered.events)

    def mix_clusters(self, peer: FeatARCPeer, own: torch.Tensor, received: dict[int, torch.Tensor],
                     row: list[tuple[int, float]]) -> None:
        """copy[k] := the row-weighted, renormalised mix of the closed neighbourhood's models in cluster k (kept
        when none is); then the peer's model := copy[its cluster]. Sums in the row's ascending order, so the
        result does not depend on the peers' placement."""
        messages = {**received, peer.id: own}
        cluster_of = {j: peer.cluster if j == peer.id else self._cluster_of(v) for j, v in messages.items()}
        mine = peer.copies[peer.cluster]
        mine.load_state_dict(peer.model.state_dict())  # what mixing leaves out (FedBN) comes from the trained model
        for k in range(self.n_clusters):
            members = [(j, w) for j, w in row if j in messages and cluster_of[j] == k]
            total = sum(w for _, w in members)
            if not members or total <= 0:
                continue
            acc = torch.zeros_like(own[:-1])
            for j, w in members:
                acc.add_(messages[j][:-1], alpha=w / total)
            peer.copy_mixable[k].unflatten_(acc)
        peer.model.load_state_dict(mine.state_dict())

    # ------------------------------------------------------------------ evaluation
    def cluster_averages(self, net: RoundNetwork) -> list[nn.Module]:
        """The network average of every cluster's copies over the peers alive in `net` (collective, exact)."""
        alive = self.alive_peers(net)
        n = len(self.evaluated(net))
        first = self.peers[self.ctx.local_peers[0]]
        out = []
        for k in range(self.n_clusters):
            mean = exact_mean(self.ctx.world, {p: self.peers[p].copy_full[k].flatten() for p in alive}, n,
                              like=first.copy_full[k].flatten())
            model = self.new_model()
            state = MixableState(model)
            state.unflatten_(mean.to(state.dtype).to(self.ctx.device))
            out.append(model.eval())
        return out

    def average_model(self, net: RoundNetwork) -> nn.Module:
        """The network average of the copies of the largest cluster (lowest index on ties); collective. The
        average over all peers' own models would mix unrelated clusters."""
        sizes = self.cluster_sizes(net)
        return self.cluster_averages(net)[assign_cluster([float(s) for s in sizes])]

    def cluster_sizes(self, net: RoundNetwork) -> list[int]:
        """How many peers evaluated in `net`'s round are in each cluster (collective)."""
        mine = [self.peers[p].cluster for p in self.alive_peers(net)]
        every = [c for part in self.ctx.world.allgather(mine) for c in part]
        return [every.count(k) for k in range(self.n_clusters)]

    def evaluate(self, round: int, final: bool, net: RoundNetwork
                 ) -> tuple[dict[str, float], dict[int, dict[str, float]]]:
        averages = self.cluster_averages(net)
        sizes = self.cluster_sizes(net)
        # the drift exchange before the root scores (as GossipLearner); none when no peer is scored
        between = self.neighbour_drift(round, net) if self.peers_scored(final) and self.cfg.eval_peers != 0 else {}
        metrics: dict[str, float] = {}
        scores: list[dict[str, float]] = [{} for _ in averages]
        if self.ctx.world.is_root:
            scores = [self.score(avg, None, final) for avg in averages]
            for k, s in enumerate(scores):
                metrics.update({f"{name}_cluster{k}": v for name, v in s.items()})
                metrics[f"cluster_size{k}"] = float(sizes[k])
            by = "probe_acc" if final and "probe_acc" in scores[0] else "knn_acc"
            if by in scores[0]:
                best = assign_cluster([s[by] for s in scores])
                metrics[BEST_CLUSTER] = float(best)
            for name in scores[0]:
                metrics[f"{name}_avg"] = max(s[name] for s in scores)
        baseline = self.baseline_here(final)
        per_peer: dict[int, dict[str, float]] = {}
        if self.peers_scored(final):
            per_peer = self.final_peer_scores(metrics, between, net, lambda p: averages[self.peers[p].cluster],
                                              lambda p: {"cluster": float(self.peers[p].cluster)},
                                              averages=list(zip(averages, scores)), final=final)
        self.report_baseline(metrics, baseline)
        return metrics, per_peer
