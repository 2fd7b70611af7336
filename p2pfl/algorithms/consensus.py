"""Gossip averaging of random vectors: the runtime's own check against the spectral theory (SPEC §1–§2).

Every peer starts from a seeded random vector and mixes it with its neighbours each round. Under a doubly
stochastic W the average is preserved and the consensus distance falls like |λ2|^(2t). There is no local
training, so a peer back from sitting out holds nothing stale: consensus ignores --rejoin and, under
Metropolis, keeps the mean through failures, churn and resampling.

With --gossip push-sum (SPEC §7) the peers mix column-stochastically instead (no gradient: G = 0), each holding its
de-biased z = x/w: Σ_i x_i = Σ_i w_i z_i is kept exactly on one-way graphs too, where row-renormalised weight
averaging drifts; `mass_shift` measures it as `mean_shift` measures the mean of the z_i, which reaches the start's
mean as the peers agree.
"""
from __future__ import annotations

import torch

from p2pfl.algorithms.peer import ConsensusPeer
from p2pfl.capabilities import GIVES_GRADIENTS, HANDS_OVER, MIXES_BY_W
from p2pfl.context import RunContext
from p2pfl.gossip import exact_mean
from p2pfl.gossip.schemes.base import DEBIASED, PLAIN_MIX
from p2pfl.method import ASYNCHRONOUS, Algorithm, Phase
from p2pfl.network import RoundNetwork
from p2pfl.options import method_options, opt
from p2pfl.runtime.limits import check_bytes
from p2pfl.seeding import torch_generator


@method_options("consensus")
class ConsensusOptions:
    """The vectors consensus mixes (the project's choices: a size where the runtime's cost shows, float32)."""

    vector_size: int = opt(1_000_000, "floats per peer for --algorithm consensus", section="consensus",
                           bounds=">= 1")
    vector_dtype: str = opt("float32", "precision of the consensus vectors (float64 isolates the weights from "
                                       "float32 rounding)", ("float32", "float64"), section="consensus")


#: The copies of a peer's vector a round holds at once (the vector, its mixed successor, its message).
VECTOR_COPIES = 3


class Consensus(Algorithm):
    name = "consensus"
    headline = "consensus"
    #: It mixes one vector per peer by W (so --compress and the schemes that need no gradient apply: push-sum,
    #: CHOCO-gossip) and averages it pairwise under --mode async.
    capabilities = frozenset({MIXES_BY_W, ASYNCHRONOUS, HANDS_OVER})
    lacks = {GIVES_GRADIENTS: "it has no gradient: its vectors are not trained"}
    ignores = dict.fromkeys(
        ("dataset", "data_dir", "download", "partition", "rotate_groups", "train_subset", "validation", "model",
         "local_epochs", "local_steps", "batch_size", "optimizer", "lr", "momentum", "nesterov", "weight_decay",
         "schedule", "keep_optimizer", "batch_peers", "fedbn", "sl_augment", "crop_scale", "weight_by_data",
         "probe_epochs", "knn_k", "zeta2_batch"),
        "consensus averages random vectors: it reads no data and trains no model")
    ignores["peer_scores"] = "consensus records every peer's distance at every evaluation already"

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.peers: dict[int, ConsensusPeer] = {}
        self.initial_mean: torch.Tensor | None = None
        self.honest_mean: torch.Tensor | None = None

    def setup(self) -> None:
        size = self.cfg.vector_size
        dtype = getattr(torch, self.cfg.vector_dtype)
        # a peer's vector, its mixed successor and its message at once; checked before the first is drawn
        check_bytes(f"--vector-size {size} for {len(self.ctx.local_peers)} peer(s) on this rank",
                    VECTOR_COPIES * size * dtype.itemsize * len(self.ctx.local_peers))
        for p in self.ctx.local_peers:
            gen = torch_generator(self.cfg.seed, p, "init")
            x = torch.randn(size, generator=gen, dtype=dtype)
            self.peers[p] = ConsensusPeer(id=p, x=x.to(self.ctx.device))
        self.initial_mean = exact_mean(self.ctx.world, self.consensus_vectors(), self.ctx.n_peers)
        honest = self.evaluated(self.ctx.schedule.at(0))
        like = self.peers[self.ctx.local_peers[0]].x
        mine = {p: v for p, v in self.consensus_vectors().items() if p in honest}
        self.honest_mean = exact_mean(self.ctx.world, mine, len(honest), like=like)

    def communicate(self, round: int, net: RoundNetwork) -> Phase:
        vectors = {p: peer.x for p, peer in self.peers.items() if p in net.active}
        scheme = self.ctx.scheme
        if PLAIN_MIX in scheme.capabilities and self.cfg.gossip_steps == 1:
            mixed = self.ctx.gossip.mix(vectors, net, round, memory=self.attack_memory)
        else:  # with no gradient (G = 0, η = 1): push-sum consensus, CHOCO-gossip; --gossip-steps of them
            mixed = scheme.round_models(self.ctx.gossip, vectors, {p: torch.zeros_like(x) for p, x in vectors.items()},
                                        1.0, {p: self.peers[p].scheme for p in vectors}, net, round,
                                        steps=self.cfg.gossip_steps)
        for p, x in mixed.vectors.items():
            self.peers[p].x = x
        return Phase(events=mixed.events)

    def async_vector(self, peer: int) -> torch.Tensor:
        return self.peers[peer].x.clone()

    def load_async_vector(self, peer: int, vector: torch.Tensor) -> None:
        self.peers[peer].x = vector

    def consensus_vectors(self) -> dict[int, torch.Tensor]:
        return {p: peer.x for p, peer in self.peers.items()}

    def carried(self, peer: int) -> torch.Tensor:
        return self.peers[peer].x

    def carry(self, peer: int, vector: torch.Tensor) -> None:
        self.peers[peer].x = vector

    def evaluate(self, round: int, final: bool, net: RoundNetwork
                 ) -> tuple[dict[str, float], dict[int, dict[str, float]]]:
        """The shift of the mean of all K vectors (crashed peers' kept as they were: the quantity gossip
        preserves); each alive honest peer's distance to the mean of those, and to the mean the honest peers
        started from (where an honest network should end up whatever attackers do)."""
        mean = exact_mean(self.ctx.world, self.consensus_vectors(), self.ctx.n_peers)
        assert self.initial_mean is not None
        shift = float((mean - self.initial_mean).norm() / self.initial_mean.norm())
        alive = self.alive_peers(net)
        like = self.peers[self.ctx.local_peers[0]].x
        alive_mean = exact_mean(self.ctx.world, {p: self.peers[p].x for p in alive}, len(self.evaluated(net)),
                                like=like)
        start = self.honest_mean
        per_peer = {p: {"distance_to_mean": float((self.peers[p].x.double().cpu() - alive_mean).norm()
                                                  / alive_mean.norm()),
                        "distance_to_initial_mean": float((self.peers[p].x.double().cpu() - start).norm()
                                                          / start.norm())} for p in alive}
        metrics = {"mean_shift": shift}
        if DEBIASED in self.ctx.scheme.capabilities:
            metrics["mass_shift"] = self.mass_shift()
        return metrics, per_peer

    def mass_shift(self) -> float:
        """Push-sum's ‖Σ_i w_i z_i / K − the start's mean‖ relative to the start's mean (all K peers, crashed
        ones' as they were): the mass it conserves; collective."""
        masses = {p: self.ctx.scheme.numerator(peer.x, peer.scheme) for p, peer in self.peers.items()}
        mass = exact_mean(self.ctx.world, masses, self.ctx.n_peers)
        return float((mass - self.initial_mean).norm() / self.initial_mean.norm())
