"""Decentralised optimisers (SPEC §7): what a round does with the network besides plain weight averaging.

A scheme is a combine rule and a little state per peer on the gossip pipeline. One round of every scheme reads the
peers' models X (before their local update), their gradients G (the local update divided by −η: exactly the
gradient for one plain step), the state each peer keeps (a dict in its record, so checkpoints keep it) and the
round's network, and returns the mixed models, every vector sent through the checked exchange (bytes counted):

| scheme | sent | state |
|---|---|---|
| average | x − ηg (D-PSGD: X⁺ = W(X − ηG)) | — |
| gradient-tracking | x − ηy and y (X⁺ = W(X − ηY); Y⁺ = WY + G⁺ − G, Y₀ = G₀) | wy (WY of the last round), g |
| d2 | 2x − x⁻ − η(g − g⁻), the first round x − ηg | x⁻, g⁻ |
| exact-diffusion | as d2, mixed by W̃ = (W + I)/2 | x⁻, g⁻ |
| qgm | x − η(μm + g) (X⁺ = W X½; M⁺ = μM + (1 − μ)(X − X⁺)/η, M₀ = 0; μ = --momentum) | m |
| push-sum | [x − ηg, w]/(1 + out-degree) (X⁺ = P(X − ηG), w⁺ = Pw, w₀ = 1) | w |
| relay | to each tree neighbour j its own [m_{i→j}, c_{i→j}] (RelaySGD on a tree T, below) | m<j>, c<j>, x0 |

Push-sum's x is the numerator; the model the peer trains and is measured by is z = x/w (`model`), and its G the
gradient at z. P is column-stochastic: a sender splits its mass evenly over itself and the out-links the round's
network carries (one-way links, failures, churn: the receivers it reaches), and a receiver adds what reaches it to
the share it kept, so Σ_i x_i and Σ_i w_i are transported exactly (x and w travel in one message of d + 1 values:
a link fails for both or neither). A message rejected after it was sent loses its mass.

With E > 1 local steps (the learners, and the quadratic problem's --local-steps) a scheme corrects the whole local
update as if it were one step: G = (x − x_E)/η, x the mixable state before the E steps, x_E after them. Under qgm
those E steps are plain SGD without momentum (--momentum is μ, applied once a round here: the peer sends
x − η(μm + G) = x_E − ημm); under push-sum they start from z = x/w and G = (z − z_E)/η.

The tracker's correction G⁺ − G needs the gradient at the mixed model, so a peer keeps WY and its last gradient
and completes Y at the start of its next round (Y = WY + G − g). Each uses the weights of the round's surviving
network: the second vector of gradient tracking mixes over the network the first one's exchange left (a link
rejected for x is failed for y too). A peer that sits a round out keeps its state as it was.

RelaySGD (Vogels et al. 2021) runs on a spanning tree T (`RelayTree`: the topology itself when it is a tree, else
the BFS tree of the graph rooted at peer 0; the manifest's `relay_tree` says which). With x½_i = x_i − ηg_i, peer i
sends each tree neighbour j its own message, m_{i→j} = x½_i + Σ_{k∈T(i), k≠j} m_{k→i} and the count
c_{i→j} = 1 + Σ_{k≠j} c_{k→i} (the messages it received last round), one message of d + 1 values per tree link,
carried by one checked exchange per neighbour slot (the s-th tree neighbour of every peer). Then
x_i⁺ = (x½_i + Σ_j m_{j→i} + (K − 1 − Σ_j c_{j→i}) x_init) / K with this round's messages. The counts say how many
peers' models the sums hold (a message from d hops away arrives after d rounds); the missing K − 1 − Σc are filled
with x_init, the model every peer starts from (x^(0), as in the authors' simulator: `init_state`), which each peer
keeps as `x0`, its model the first round it runs the scheme (all peers start equal: x₀ = 1 on the quadratic
problem, one seeded initial model for the learners). With the models held fixed, x_i + Σ_j m_{j→i} is the network's
sum and Σ_j c_{j→i} = K − 1 after diam(T) rounds: a tree averages exactly. RelaySGD averages uniformly (no
--weight-by-data).

Failures, by this rule of ours (the authors' Table 5 runs RelaySGD on networks that drop messages): a tree link the
round's network does not carry (a failed link, an end sitting out or crashed, a rejected message) delivers nothing,
and its receiver reuses the last message and count it got on that link (zero before the first), so the relay sums
heal once the link is back; a peer sitting out sends nothing and keeps its state. A crashed peer inside the tree
cuts it for good: each side goes on with the last sums that crossed the cut (no spanning tree is rebuilt). The tree
itself is fixed: changing graphs (resampled, dynamic and one-way topologies) are refused before training
(`check_relay`).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np
import scipy.sparse as sp
import torch

from p2pfl.gossip.checked import Events
from p2pfl.gossip.choco import choco
from p2pfl.gossip.mix import Gossip, Mixed
from p2pfl.gossip.rules import Rule
from p2pfl.network.schedule import RoundNetwork

#: The schemes the weight-mixing methods run (p2pfl.algorithms.gossip_learner: under qgm their local SGD steps run
#: without momentum, p2pfl.optim.local_momentum; under push-sum they hold z = x/w, p2pfl.gossip.debias; choco is
#: CHOCO-SGD, p2pfl.gossip.choco), which are every --gossip value (p2pfl.config reads them from here).
LEARNER_SCHEMES = ("average", "gradient-tracking", "d2", "exact-diffusion", "qgm", "push-sum", "relay", "choco")
SCHEMES = LEARNER_SCHEMES
#: D² converges only when λ_min(W) >= −1/3 (Tang et al. 2018); an even ring with Metropolis weights sits exactly at
#: −1/3 and must run, so the bound is relaxed by the eigensolver's rounding.
D2_LAMBDA_MIN = -1.0 / 3.0
D2_TOLERANCE = 1e-9


class Lazy(Rule):
    """Exact diffusion's W̃ = (W + I)/2: x_i <- (x_i + Σ_j W_ij x_j) / 2."""

    def combine(self, peer: int, own: torch.Tensor, received: dict[int, torch.Tensor], net: RoundNetwork
                ) -> tuple[torch.Tensor, list[int]]:
        mixed, _ = super().combine(peer, own, received, net)
        return mixed.add_(own).mul_(0.5), []

    def combine_all(self, own: Mapping[int, torch.Tensor], inbox: Mapping[int, dict[int, torch.Tensor]],
                    net: RoundNetwork) -> dict[int, tuple[torch.Tensor, list[int]]]:
        return {p: (mixed.add_(own[p]).mul_(0.5), []) for p, (mixed, _) in super().combine_all(own, inbox, net).items()}


class PushSum(Rule):
    """Column-stochastic mixing: the share a peer kept plus every (pre-split) message that reached it, in ascending
    sender order (the same sum whichever ranks the peers sit on)."""

    linear = False  # its sum starts from the peer's own share (a clone), not from zero

    def combine(self, peer: int, own: torch.Tensor, received: dict[int, torch.Tensor], net: RoundNetwork
                ) -> tuple[torch.Tensor, list[int]]:
        acc = own.clone()
        for j in sorted(received):
            acc.add_(received[j])
        return acc, []


@dataclass(frozen=True)
class RelayTree:
    """RelaySGD's spanning tree: each peer's tree neighbours (ascending) and where the tree came from."""

    neighbours: dict[int, tuple[int, ...]]
    source: str  # "topology" (the graph is a tree) or "bfs-spanning-tree"
    root: int = 0

    @classmethod
    def of(cls, graph: nx.Graph) -> RelayTree:
        """The graph itself when it is a tree, else its BFS spanning tree rooted at peer 0; a ValueError when the
        graph is not connected (no spanning tree)."""
        if not nx.is_connected(graph):
            raise ValueError("--gossip relay: needs a connected topology (a spanning tree of every peer)")
        tree, source = (graph, "topology") if nx.is_tree(graph) else (nx.bfs_tree(graph, 0), "bfs-spanning-tree")
        undirected = nx.Graph(tree)
        return cls({int(p): tuple(sorted(int(q) for q in undirected[p])) for p in sorted(graph)}, source)

    @property
    def edges(self) -> list[tuple[int, int]]:
        return [(p, q) for p, nbrs in self.neighbours.items() for q in nbrs if p < q]

    @property
    def slots(self) -> int:
        """The most tree neighbours a peer has: the number of exchanges a round takes."""
        return max((len(n) for n in self.neighbours.values()), default=0)

    def describe(self) -> dict[str, Any]:
        """The manifest's `relay_tree` entry."""
        return {"source": self.source, "root": self.root, "edges": [list(e) for e in self.edges]}

    def links(self, slot: int, net: RoundNetwork) -> dict[int, tuple[int, ...]]:
        """Receiver -> the senders whose `slot`-th tree neighbour it is, on the links the round carries (both ends
        active, the link up): the same on every rank."""
        out: dict[int, list[int]] = {}
        carried = net.incoming
        for i, nbrs in self.neighbours.items():
            if len(nbrs) > slot:
                j = nbrs[slot]
                if i in net.active and j in net.active and i in carried[j]:
                    out.setdefault(j, []).append(i)
        return {j: tuple(senders) for j, senders in sorted(out.items())}


def check_relay(kind: str, directed: bool) -> None:
    """Refuse before training a relay run on a graph that changes or has one-way links: RelaySGD relays over one
    fixed undirected spanning tree."""
    if kind != "static" or directed:
        raise ValueError(f"--gossip relay: relays over one fixed spanning tree, but this network is {kind}"
                         f"{' and one-way' if directed else ''}; use a static topology (chain, binary-tree, cycle, "
                         "...) with --link-failure, --participation or --churn for a network that fails")


def model(x: torch.Tensor, state: dict[str, torch.Tensor]) -> torch.Tensor:
    """The model a peer holds: x, or push-sum's de-biased z = x/w."""
    return x / state["w"] if "w" in state else x


def lambda_min(W: np.ndarray | sp.spmatrix) -> float:
    """The smallest eigenvalue of W (its real part: row-stochastic weights need not be symmetric)."""
    dense = W.toarray() if sp.issparse(W) else np.asarray(W)
    return float(np.min(np.linalg.eigvals(dense).real))


def _key(W: np.ndarray | sp.spmatrix) -> bytes:
    if sp.issparse(W):
        return W.indptr.tobytes() + W.indices.tobytes() + W.data.tobytes()
    return np.asarray(W).tobytes()


def asymmetry(W: np.ndarray | sp.spmatrix) -> float:
    """max |W_ij − W_ji|: 0 for a symmetric W."""
    diff = W - W.T
    if sp.issparse(diff):
        return float(abs(diff).max()) if diff.nnz else 0.0
    return float(np.max(np.abs(diff), initial=0.0))


def check_weights(scheme: str, weights: Sequence[np.ndarray | sp.spmatrix]) -> None:
    """Refuse before training a d2 run whose W (any round's) has λ_min < −1/3 or is not symmetric (D² assumes
    W = Wᵀ; on one-way links its iteration can grow without bound): one line naming exact diffusion."""
    if scheme != "d2":
        return
    for W in {_key(W): W for W in weights}.values():  # a changing network repeats its Ws: each checked once
        low = lambda_min(W)
        if low < D2_LAMBDA_MIN - D2_TOLERANCE:
            raise ValueError(f"--gossip d2: needs λ_min(W) >= -1/3, this network's W has {low:.4f}; use --gossip "
                             "exact-diffusion (W̃ = (W + I)/2) instead")
        skew = asymmetry(W)
        if skew > D2_TOLERANCE:
            raise ValueError(f"--gossip d2: needs a symmetric W, this network's is not (max |W_ij - W_ji| = "
                             f"{skew:.4g}: one-way links or weights); use --gossip exact-diffusion instead")


#: The schemes whose fixed point is exact only when W is doubly stochastic.
CORRECTED = ("gradient-tracking", "exact-diffusion")


def biased_scheme_warning(scheme: str, directed: bool, failing: bool) -> str | None:
    """Gradient tracking and exact diffusion on one-way links that fail or lose peers: a round's W is then only
    row-stochastic (a sender's lost out-link is not given back to it), so they converge to a biased point."""
    if scheme not in CORRECTED or not directed or not failing:
        return None
    return (f"--gossip {scheme} on one-way links with failures (--link-failure, --churn, --crash or "
            "--participation): W is only row-stochastic in the rounds that lose a link or a peer, so it converges "
            "to a biased point, not the optimum")


@dataclass
class SchemeRound:
    """A scheme's round: each local active peer's model (before its update) and gradient."""

    x: dict[int, torch.Tensor]
    g: dict[int, torch.Tensor]
    lr: float
    momentum: float = 0.0  # qgm's μ
    tree: RelayTree | None = None  # relay's spanning tree
    consensus_step: float = 1.0  # CHOCO's γ
    support: nx.Graph | None = None  # the links a round may use (CHOCO keeps messages for them; None: every pair)


def step(scheme: str, gossip: Gossip, work: SchemeRound, state: dict[int, dict[str, torch.Tensor]],
         net: RoundNetwork, round: int, sizes: Sequence[float] | None = None) -> Mixed:
    """One round of `scheme` for the local active peers of `work`: their mixed models, the network the exchanges
    left and their events. `state[p]` (the peer's record's dict) is updated in place."""
    x, g, lr = work.x, work.g, work.lr
    if scheme == "average":
        return gossip.combine({p: x[p] - lr * g[p] for p in x}, net, round, Rule(sizes), gossip.compressor)
    if scheme == "gradient-tracking":
        y = {}
        for p in x:
            s = state[p]
            y[p] = g[p].clone() if "wy" not in s else s["wy"] + g[p] - s["g"]
        mixed = gossip.combine({p: x[p] - lr * y[p] for p in x}, net, round, Rule(sizes))
        tracked = gossip.combine(y, mixed.net, round, Rule(sizes))
        for p in x:
            state[p]["wy"], state[p]["g"] = tracked.vectors[p], g[p].clone()
        return Mixed(mixed.vectors, tracked.net, mixed.events + tracked.events)
    if scheme in ("d2", "exact-diffusion"):
        sent = {}
        for p in x:
            s = state[p]
            sent[p] = x[p] - lr * g[p] if "x" not in s else 2 * x[p] - s["x"] - lr * (g[p] - s["g"])
        mixed = gossip.combine(sent, net, round, Lazy(sizes) if scheme == "exact-diffusion" else Rule(sizes))
        for p in x:
            state[p]["x"], state[p]["g"] = x[p].clone(), g[p].clone()
        return mixed
    if scheme == "qgm":
        mu = work.momentum
        m = {p: state[p].get("m", torch.zeros_like(x[p])) for p in x}
        mixed = gossip.combine({p: x[p] - lr * (mu * m[p] + g[p]) for p in x}, net, round, Rule(sizes))
        for p in x:
            state[p]["m"] = mu * m[p] + (1 - mu) * (x[p] - mixed.vectors[p]) / lr
        return mixed
    if scheme == "push-sum":
        out = np.bincount(net.adjacency.indices, minlength=net.n_peers)  # A[i, j]: i hears from j, so column j
        # counts j's surviving out-links
        sent = {}
        for p in x:
            w = state[p].get("w", torch.ones(1, dtype=x[p].dtype, device=x[p].device))
            sent[p] = torch.cat([x[p] - lr * g[p], w]) / (1 + int(out[p]))
        mixed = gossip.combine(sent, net, round, PushSum())
        for p in x:
            state[p]["w"] = mixed.vectors[p][-1:].clone()
        return Mixed({p: v[:-1].clone() for p, v in mixed.vectors.items()}, mixed.net, mixed.events)
    if scheme == "relay":
        assert work.tree is not None, "--gossip relay needs the run's RelayTree"
        return relay(gossip, work, state, net, round, work.tree)
    if scheme == "choco":
        return choco(gossip, x, g, lr, work.consensus_step, state, net, round, sizes, work.support)
    raise ValueError(f"--gossip: unknown scheme {scheme!r}; allowed: {', '.join(SCHEMES)}")


def _relayed(half: torch.Tensor, s: dict[str, torch.Tensor], sources: Sequence[int]) -> torch.Tensor:
    """[x½ + Σ_k m_k, 1 + Σ_k c_k] over the last messages from `sources` (in ascending order)."""
    out = torch.cat([half, torch.ones(1, dtype=half.dtype, device=half.device)])
    for k in sources:
        if f"m{k}" in s:
            out[:-1] += s[f"m{k}"]
            out[-1:] += s[f"c{k}"]
    return out


def relay(gossip: Gossip, work: SchemeRound, state: dict[int, dict[str, torch.Tensor]], net: RoundNetwork,
          round: int, tree: RelayTree) -> Mixed:
    """One RelaySGD round (module docstring): per tree-neighbour slot one checked exchange of [m, c]; what
    arrives replaces the receiver's last message on that link, what does not leaves it as it was."""
    K = net.n_peers
    half = {p: work.x[p] - work.lr * work.g[p] for p in work.x}
    for p in work.x:
        if "x0" not in state[p]:
            state[p]["x0"] = work.x[p].clone()
    sent = {p: {j: _relayed(half[p], state[p], [k for k in tree.neighbours[p] if k != j])
                for j in tree.neighbours[p]} for p in work.x}
    events = Events()
    for slot in range(tree.slots):
        vectors = {p: sent[p][nbrs[slot]] for p in work.x if len(nbrs := tree.neighbours[p]) > slot}
        got = gossip.checked.exchange(vectors, round, tree.links(slot, net), net=net)
        for p in got.inbox:
            for j, v in got.kept(p).items():
                state[p][f"m{j}"], state[p][f"c{j}"] = v[:-1].clone(), v[-1:].clone()
        got.release()
        assert got.net is not None
        net, events = got.net, events + got.events
    mixed = {}
    for p in work.x:
        total = _relayed(half[p], state[p], tree.neighbours[p])
        mixed[p] = (total[:-1] + (K - total[-1]) * state[p]["x0"]) / K
    return Mixed(mixed, net, events)


__all__ = ["CORRECTED", "D2_LAMBDA_MIN", "D2_TOLERANCE", "LEARNER_SCHEMES", "Lazy", "PushSum", "RelayTree", "SCHEMES",
           "SchemeRound", "asymmetry", "biased_scheme_warning", "check_relay", "check_weights", "lambda_min", "model",
           "relay", "step"]
