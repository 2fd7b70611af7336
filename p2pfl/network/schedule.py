"""The network of round t: who is up, who takes part, which links carry messages, and with which weights.

Everything here is a pure function of (seed, t) and the options, computed identically on every rank, so no
receive ever waits for a peer that is not coming and a result never depends on how peers sit on ranks.

A round starts from the topology's links (static, the random graph drawn anew with --resample, or a dynamic
topology with its --topology-params), keeps the active peers (alive, drawn by --participation, not out by
--churn, and chosen by a dynamic topology that chooses who takes part) and drops each link
that fails this round (--link-failure). The weights are recomputed on what survives: Metropolis and max-degree stay
symmetric and doubly stochastic, so gossip keeps the network mean; uniform stays row-stochastic; a peer without an
active link keeps its own vector (W_ii = 1). A directed round (the one-peer exponential graph) averages uniformly
over each peer's closed in-neighbourhood (1/2 each there). A weighted dynamic topology (Base-(k+1)) mixes by its
own weights on the links that survive, what a lost link carried staying on the peer's diagonal. `--mixing server`
on the star makes the hub average the active leaves it can reach, itself included, and send the average back (W =
11ᵀ/|P| on that set); the hub is the server, so --participation and --churn never take it out (--crash can).
"""
from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cached_property, partial
from typing import Any

import networkx as nx
import numpy as np
import scipy.sparse as sp

import topologies
from p2pfl.network.faults import choose_stragglers, parse_crashes
from p2pfl.network.topology_options import params
from p2pfl.records import NetworkManifest, NetworkRecord
from p2pfl.seeding import SHARED, numpy_rng
from topologies import sparse
from topologies.dynamic import Cycle, Dynamic, Round
from topologies.generators import sample_gnp
from topologies.mixing import KINDS

HUB = 0  # the star's centre, the server of --mixing server
#: Dynamic kinds are checked for peers left alone over at most this many rounds (static ones need round 1 only).
CHECK_HORIZON = 64


def active_peers(seed: int, round: int, n_peers: int, rho: float) -> set[int]:
    """The ⌈rho·K⌉ peers drawn to take part in `round` (SPEC §2, partial participation)."""
    if rho >= 1.0:
        return set(range(n_peers))
    count = max(1, math.ceil(rho * n_peers))
    rng = numpy_rng(seed, SHARED, f"participation/{round}")
    return {int(p) for p in rng.choice(n_peers, size=count, replace=False)}


@dataclass(frozen=True)
class NetworkOptions:
    """What a network schedule is built from (the run's topology, fault and seed options, by their names)."""

    peers: int | None
    seed: int
    topology: str
    topology_params: str | None  # KEY=VALUE,... for the topology's function (topologies.parse_params)
    p: float
    resample: bool
    mixing: str
    participation: float
    churn: float
    link_failure: float
    crash: str | None
    stragglers: float
    straggler_work: float
    rejoin: str

    @classmethod
    def of(cls, options: Any) -> NetworkOptions:
        """These options read off an object that has them as attributes (a resolved RunConfig); the topology's
        parameters with its own flags (--fanout, --active, ...) merged in."""
        return cls(**{**{f.name: getattr(options, f.name) for f in fields(cls)}, "topology_params": params(options)})


@dataclass(frozen=True, eq=False)
class RoundNetwork:
    """The network of one round: A[i, j] means peer i hears from peer j; W its mixing matrix (identity rows for
    peers not active); the active, alive, rejoining and fresh peers; the stragglers' share of local steps.
    A and W are sparse (scipy CSR, indices ascending): a round costs O(links), never K × K."""

    round: int
    adjacency: sp.csr_matrix
    W: sp.csr_matrix
    active: frozenset[int]
    alive: frozenset[int]
    rejoining: frozenset[int] = frozenset()  # active now, not in the round before: their model is stale
    fresh: frozenset[int] = frozenset()  # active now and in the round before: their model is current
    work: Mapping[int, float] = field(default_factory=dict)  # active straggler -> fraction of its local steps
    server: bool = False
    offered: int = 0  # links of the round's topology before anyone was out and before link failures
    reweigh: Callable[[sp.csr_matrix, frozenset[int]], sp.csr_matrix] | None = field(default=None, repr=False)
    directed: bool = False  # one-way links: a failed link fails one way only
    #: receiver -> sender: before training, each receiver takes the model its sender held after the round before
    #: (a topology that moves models, teleport; only active receivers and alive senders)
    handover: Mapping[int, int] = field(default_factory=dict)

    def without(self, links: Iterable[tuple[int, int]]) -> RoundNetwork:
        """This round with the (receiver, sender) links failed as well, both ways on an undirected graph, and
        the weights recomputed (a rejected message counts as a failed link)."""
        a = sparse.without(self.adjacency, links, both_ways=not self.directed)
        assert self.reweigh is not None, "a RoundNetwork from NetworkSchedule.at"
        return replace(self, adjacency=a, W=self.reweigh(a, self.active))

    @property
    def n_peers(self) -> int:
        return self.W.shape[0]

    @property
    def crashed(self) -> frozenset[int]:
        return frozenset(range(self.n_peers)) - self.alive

    @cached_property
    def incoming(self) -> dict[int, tuple[int, ...]]:
        """Per active peer, the peers it hears from this round, ascending (the exchange's links)."""
        a = self.adjacency
        indices = a.indices.tolist()
        bounds = a.indptr.tolist()
        return {i: tuple(indices[bounds[i]:bounds[i + 1]]) for i in sorted(self.active)}

    def degree(self, peer: int) -> int:
        """How many peers `peer` hears from this round."""
        return int(self.adjacency.indptr[peer + 1] - self.adjacency.indptr[peer])

    @cached_property
    def _rows(self) -> tuple[list[int], list[int], list[float]]:
        return self.W.indptr.tolist(), self.W.indices.tolist(), self.W.data.tolist()

    def row(self, peer: int, sizes: Sequence[float] | None = None) -> list[tuple[int, float]]:
        """Peer's mixing weights over its closed in-neighbourhood, ascending by neighbour, summing to 1; with
        `sizes` each W_ij is scaled by n_j first (data-size weighting: FedAvg on complete/uniform or a server)."""
        if sizes is None and peer in self._row_cache:
            return self._row_cache[peer]
        bounds, indices, data = self._rows
        lo, hi = bounds[peer], bounds[peer + 1]
        row = list(zip(indices[lo:hi], data[lo:hi]))
        if sizes is not None:
            row = [(j, w * float(sizes[j])) for j, w in row]
        total = sum(w for _, w in row)
        out = [(j, w / total) for j, w in row]
        if sizes is None:
            self._row_cache[peer] = out
        return out

    @cached_property
    def row_weights(self) -> np.ndarray:
        """Every row of `row` as one array aligned with W.indices: W's data divided by its row's sum, the sum
        taken term by term in the row's order as `row` takes it (so each weight is bitwise `row`'s)."""
        indptr, data = self.W.indptr, self.W.data
        lengths = np.diff(indptr)
        totals = np.zeros(len(lengths))
        for k in range(int(lengths.max(initial=0))):
            rows = np.flatnonzero(lengths > k)
            totals[rows] += data[indptr[rows] + k]
        return data / np.repeat(totals, lengths)

    @cached_property
    def _row_cache(self) -> dict[int, list[tuple[int, float]]]:
        """Rows already built (callers copy, never change them); shared by a static network's rounds."""
        return {}

    def work_fraction(self, peer: int) -> float:
        """The share of its local steps `peer` does this round (below 1 for a straggler)."""
        return self.work.get(peer, 1.0)

    @property
    def links(self) -> int:
        """Messages of one exchange along the round's links (i hears from j counts once)."""
        return int(self.adjacency.nnz)

    def digest(self) -> str:
        """crc32 of the round's links, as (receiver, sender) int64 pairs row-major: two rounds with equal digests
        used the same links."""
        rows, cols = sparse.pairs(self.adjacency)
        return f"{zlib.crc32(np.stack([rows, cols], axis=1).tobytes()):08x}"

    def sigma2(self) -> float:
        """‖W − J‖₂ over the alive peers (J = 11ᵀ/|alive|): a round shrinks the consensus distance by at most
        its square when W is doubly stochastic (SPEC §1), so Π σ2² over the rounds used is the prediction."""
        keep = sorted(self.alive)
        w = self.W[keep][:, keep].toarray()
        return float(np.linalg.norm(w - np.full(w.shape, 1.0 / len(keep)), 2)) if keep else 0.0

    def record(self, spectral: bool) -> NetworkRecord:
        """The round record's `network` entry (sigma2 only when `spectral`: it costs an SVD of W)."""
        active = sorted(self.active)
        out = NetworkRecord(**{
            "links": self.links, "digest": self.digest(), "crashed": sorted(self.crashed),
            "rejoining": sorted(self.rejoining), "straggling": sorted(self.work),
            "degree": dict(zip(map(str, active), np.diff(self.adjacency.indptr)[active].tolist())),
        })
        if spectral:
            out["sigma2"] = self.sigma2()
        return out


class NetworkSchedule:
    """The round networks of a run (see the module docstring): `at(t)` for round t, identical on every rank."""

    def __init__(self, n_peers: int, seed: int = 0, *, graph: nx.Graph | None = None, dynamic: Dynamic | None = None,
                 resample_p: float | None = None, mixing: str = "metropolis", participation: float = 1.0,
                 churn: float = 0.0, link_failure: float = 0.0, crashes: Mapping[int, int] | None = None,
                 stragglers: Mapping[int, float] | None = None, rejoin: str = "mix") -> None:
        if sum(x is not None for x in (graph, dynamic, resample_p)) != 1:
            raise ValueError("a schedule has exactly one of: a static graph, a dynamic topology, a resampled G(K, p)")
        self.n = n_peers
        self.seed = seed
        self.dynamic = dynamic
        self.resample_p = resample_p
        self.mixing = topologies.base.canonical(mixing)
        self.server = self.mixing == "server"
        self.participation = participation
        self.churn = churn
        self.link_failure = link_failure
        self.crashes = dict(crashes or {})
        self.stragglers = dict(stragglers or {})
        self.rejoin = rejoin
        self.directed = dynamic is not None and dynamic.directed
        if graph is not None:
            self.kind = "static"
            self.support = graph
            self._static = sparse.links_matrix(graph, n_peers)
            self._static_W = self._weights(self._static, frozenset(range(n_peers)))
        else:
            self.kind = dynamic.name if dynamic is not None else "resample"
            self.support = dynamic.support_of(n_peers) if dynamic is not None else topologies.build("complete", n_peers)
        self._support_pairs: tuple[np.ndarray, np.ndarray] | None = None
        self._incoming: dict[int, tuple[int, ...]] | None = None  # the static everyone-up round's links
        self._static_rows: dict[int, list[tuple[int, float]]] = {}  # and its rows of W
        self._static_weights: np.ndarray | None = None  # and those rows as one array
        self._rounds: dict[int, Round] = {}  # the dynamic topology's latest rounds (links and who takes part)

    @classmethod
    def from_options(cls, options: NetworkOptions, graph: nx.Graph) -> NetworkSchedule:
        """The schedule of a run's network options whose static (or support) graph is `graph`. ValueError on bad
        input."""
        o = options
        n = int(o.peers or graph.number_of_nodes())
        kinds: dict[str, Any] = {"graph": graph}
        name = topologies.base.canonical(o.topology)
        if name in topologies.DYNAMIC:
            kinds = {"dynamic": topologies.DYNAMIC[name].bind(**topologies.parse_params(o.topology_params))}
        elif o.resample:
            kinds = {"resample_p": o.p}
        return cls(n, o.seed, **kinds, mixing=o.mixing, participation=o.participation, churn=o.churn,
                   link_failure=o.link_failure, crashes=parse_crashes(o.crash, n, o.seed),
                   stragglers=choose_stragglers(o.seed, n, o.stragglers, o.straggler_work), rejoin=o.rejoin)

    # ------------------------------------------------------------------ the pieces of round t
    @property
    def lossy(self) -> bool:
        """Some round may lose a link or a peer: link failures, churn, crashes, participation below 1, or a
        dynamic topology that chooses who takes part."""
        return bool(self.link_failure or self.churn or self.crashes or self.participation < 1
                    or (self.dynamic is not None and self.dynamic.chooses_active))

    def _round(self, t: int) -> Round:
        """The dynamic topology's round t, kept for the few rounds a schedule asks about at once."""
        assert self.dynamic is not None
        if t not in self._rounds:
            if len(self._rounds) >= 4:
                del self._rounds[next(iter(self._rounds))]
            self._rounds[t] = self.dynamic.round(self.n, self.seed, t)
        return self._rounds[t]

    @property
    def hands_over(self) -> bool:
        """Whether rounds hand models from one round's peers to the next's (teleport)."""
        return self.dynamic is not None and self.dynamic.hands_over

    def handover(self, t: int, active: frozenset[int], alive: frozenset[int]) -> dict[int, int]:
        """Round t's hand-over (receiver -> sender) among the `active` receivers and `alive` senders."""
        if not self.hands_over or t <= 0:
            return {}
        return {i: j for i, j in self._round(t).handover.items() if i in active and j in alive}

    def chosen(self, t: int) -> frozenset[int]:
        """The peers the topology lets take part in round t (every peer unless a dynamic topology chooses)."""
        if self.dynamic is None or not self.dynamic.chooses_active:
            return self._everyone
        return self._round(t).active

    def topology_links(self, t: int) -> sp.csr_matrix:
        """The links of round t before anyone is out and before link failures."""
        if self.kind == "static":
            return self._static
        if self.dynamic is not None:
            return sparse.links_matrix(self._round(t).links, self.n)
        rng = numpy_rng(self.seed, SHARED, f"topology/{t}")
        return sparse.links_matrix(sample_gnp(rng, self.n, self.resample_p, what=f"--resample (round {t})"), self.n)

    def alive(self, t: int) -> frozenset[int]:
        """Peers not crashed by round t (a crash P@R takes P out from round R on, for good)."""
        gone = {p for p, r in self.crashes.items() if r <= t}
        return frozenset(range(self.n)) - gone if gone else self._everyone

    @cached_property
    def _everyone(self) -> frozenset[int]:
        return frozenset(range(self.n))

    def active(self, t: int) -> frozenset[int]:
        """Peers taking part in round t: alive, drawn by --participation, not out by --churn, chosen by the
        topology (round 0: all alive)."""
        alive = self.alive(t)
        if t <= 0:
            return alive
        drawn = active_peers(self.seed, t, self.n, self.participation)
        if self.churn > 0.0:
            out = numpy_rng(self.seed, SHARED, f"churn/{t}").random(self.n) < self.churn
            drawn = {p for p in drawn if not out[p]}
        if self.dynamic is not None and self.dynamic.chooses_active:
            drawn &= self.chosen(t)
        if self.server and HUB in alive:
            drawn.add(HUB)
        return frozenset(drawn) & alive

    def _failures(self, t: int) -> sp.csr_matrix:
        """Links that fail in round t, each independently with probability --link-failure (an undirected edge
        fails both ways, a one-way link on its own): one draw per link of the support graph, in its sorted order
        (i < j; a directed schedule draws i -> j, then j -> i), so a link's fate does not depend on who else is up."""
        if self._support_pairs is None:
            edges = np.array(sorted((min(u, v), max(u, v)) for u, v in self.support.edges),
                             dtype=np.int64).reshape(-1, 2)
            self._support_pairs = edges[:, 0].copy(), edges[:, 1].copy()
        lo, hi = self._support_pairs
        rng = numpy_rng(self.seed, SHARED, f"links/{t}")
        if self.directed:
            u = rng.random((len(lo), 2)) < self.link_failure
            rows = np.concatenate([hi[u[:, 0]], lo[u[:, 1]]])  # i -> j fails: j no longer hears i
            cols = np.concatenate([lo[u[:, 0]], hi[u[:, 1]]])
        else:
            u = rng.random(len(lo)) < self.link_failure
            rows = np.concatenate([lo[u], hi[u]])
            cols = np.concatenate([hi[u], lo[u]])
        return sparse.from_pairs(rows, cols, self.n)

    def _own_weights(self, t: int) -> sp.csr_matrix:
        """Round t's off-diagonal weights as a weighted dynamic topology gives them (W_ij on its link j -> i)."""
        edges = self._round(t).links.edges(data="weight")
        senders, receivers, values = (np.array(c) for c in zip(*edges)) if edges else ([], [], [])
        return sparse.from_pairs(receivers, senders, self.n, values, np.float64)

    def _weights(self, a: sp.csr_matrix, active: frozenset[int], t: int = 0) -> sp.csr_matrix:
        """W on round t's surviving links `a` (rows and columns of peers not active are empty); a weighted dynamic
        topology's own W_ij on them, a failed link's weight left on the diagonal (symmetric stays symmetric)."""
        n = self.n
        if self.server:
            members = []
            if HUB in active:
                rows, cols = sparse.pairs(a)
                both = set(cols[rows == HUB].tolist()) & set(rows[cols == HUB].tolist())
                members = [HUB] + [i for i in sorted(active) if i != HUB and i in both]
            inside = np.zeros(n, dtype=bool)
            inside[members] = True
            outside = np.flatnonzero(~inside)
            m = np.asarray(members, dtype=np.int64)
            rows = np.concatenate([np.repeat(m, len(m)), outside])
            cols = np.concatenate([np.tile(m, len(m)), outside])
            values = np.concatenate([np.full(len(m) ** 2, 1.0 / max(1, len(m))), np.ones(len(outside))])
            return sparse.from_pairs(rows, cols, n, values, np.float64)
        af = a.astype(np.float64)
        if self.dynamic is not None and self.dynamic.weighted:  # its own weights on the links that survive
            return sparse.with_diagonal(sp.csr_matrix(self._own_weights(t).multiply(af)))
        if self.directed:  # uniform over each peer's closed in-neighbourhood (row degrees are in-degrees)
            return KINDS["uniform"](af)
        return KINDS[self.mixing](af)

    def column_drift(self, t: int) -> float:
        """max_j |Σ_i W_ij − 1| of round t's topology with every peer and link up: 0 (to rounding) where W is doubly
        stochastic by construction, above it where the topology alone makes W only row-stochastic (EL-Local)."""
        w = self._weights(self.topology_links(t), self._everyone)
        return float(np.abs(np.asarray(w.sum(axis=0)).ravel() - 1.0).max(initial=0.0))

    @property
    def static_weights(self) -> sp.csr_matrix:
        """W of the static graph with every peer and link up (what the topology itself mixes by)."""
        return self._static_W

    def at(self, t: int, active: Sequence[int] | None = None) -> RoundNetwork:
        """The network of round t (`active` overrides who takes part: a testing aid)."""
        alive = self.alive(t)
        act = self.active(t) if active is None else frozenset(active) & alive
        base = self.topology_links(t)
        everyone = len(act) == self.n
        static = self.kind == "static" and everyone and self.link_failure == 0.0
        if static:
            a, w = self._static, self._static_W
        else:
            mask = np.zeros(self.n, dtype=bool)
            mask[sorted(act)] = True
            a = sparse.among(base, mask)
            if self.link_failure > 0.0:
                a = sparse.difference(a, self._failures(t))
            w = self._weights(a, act, t)
        before = self.active(t - 1) if t >= 2 else act
        handover = self.handover(t, act, alive)  # a receiver takes its model handed over, not its neighbours' mix
        net = RoundNetwork(round=t, adjacency=a, W=w, active=act, alive=alive, rejoining=act - before - handover.keys(),
                           fresh=act & before, work={p: f for p, f in self.stragglers.items() if p in act},
                           server=self.server, offered=int(base.nnz), reweigh=partial(self._weights, t=t),
                           directed=self.directed, handover=handover)
        if static:  # every such round has the same links and weights: their maps are built once
            if self._incoming is None:
                self._incoming = net.incoming
            net.__dict__["incoming"] = self._incoming
            net.__dict__["_row_cache"] = self._static_rows
            if self._static_weights is None:
                self._static_weights = net.row_weights
            net.__dict__["row_weights"] = self._static_weights
        return net

    # ------------------------------------------------------------------ checks and description
    def lonely(self, rounds: int) -> list[int]:
        """Peers alive (and chosen by the topology) in some round that hear from no such peer in any round, nor on
        one-way links send to one (participation, churn and link failures aside: those are draws, not structure).
        Static graphs need round 1 only: crashes only remove."""
        heard: set[int] = set()
        seen: set[int] = set()
        horizon = 1 if self.kind == "static" else min(rounds, CHECK_HORIZON)
        for t in range(1, min(rounds, horizon) + 1):
            alive = self.alive(t) & self.chosen(t)
            mask = np.zeros(self.n, dtype=bool)
            mask[sorted(alive)] = True
            rows, cols = sparse.pairs(self.topology_links(t))
            hears = np.zeros(self.n, dtype=bool)
            hears[rows[mask[cols]]] = True
            if self.directed:  # one way, a peer that only sends takes part too (EL-Local's peers no one drew)
                hears[cols[mask[rows]]] = True
            seen |= alive
            heard |= {int(p) for p in np.flatnonzero(hears & mask)}
        return sorted(seen - heard)

    def describe(self) -> NetworkManifest:
        """The manifest's `network` entry: what changes and fails, and how."""
        weights = ("the topology's own" if self.dynamic is not None and self.dynamic.weighted
                   else "uniform over the closed in-neighbourhood (1/2 on the one-peer exponential graph)"
                   if self.directed else self.mixing)
        cycle = self.dynamic.cycle_of(self.n) if self.dynamic is not None else Cycle(None, None)
        return NetworkManifest(
            kind=self.kind, directed=self.directed, weights=weights, server=self.server,
            participation=self.participation, churn=self.churn, link_failure=self.link_failure,
            resample_p=self.resample_p, crashes={str(p): r for p, r in self.crashes.items()},
            stragglers={str(p): f for p, f in self.stragglers.items()}, rejoin=self.rejoin,
            support_edges=self.support.number_of_edges(), period=cycle.period, exact_consensus_round=cycle.exact)
