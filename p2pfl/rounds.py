"""The round machinery every method shares: the round's network, rejoining, local update, exchange and mix,
evaluation, logging.

An algorithm supplies only what differs (`Algorithm`); `Runner` drives the synchronous rounds of SPEC §2 for
the peers hosted by this rank over the network the schedule gives each round (p2pfl.network), gathers the
per-peer records to rank 0, and writes the run folder.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import networkx as nx
import torch

from p2pfl.byzantine import Robust
from p2pfl.comm.placement import Placement
from p2pfl.comm.transport import Transport
from p2pfl.comm.world import World
from p2pfl.config import RunConfig, parse_fault
from p2pfl.gossip import CheckedExchange, Events, Gossip, consensus_distance
from p2pfl.network import NetworkSchedule, RoundNetwork
from p2pfl.network.timing import NetworkModel
from p2pfl.records import (
    EvalRecord,
    NetworkSummary,
    RoundStart,
    SimRound,
    Summary,
    eval_record,
    round_record,
    round_start,
    sim_round,
    summarise_eval,
    summarise_round,
    summary_record,
)
from p2pfl.runtime.checkpoint import (
    load_peer,
    load_state,
    peer_path,
    record_state,
    recorded_digest,
    restore_record,
    save_peer,
    save_state,
)
from p2pfl.runtime.heap import frozen_heap
from p2pfl.runtime.memory import peak_bytes
from p2pfl.runtime.preemption import PREEMPTED_EXIT, StopSignals
from p2pfl.runtime.progress import Progress, summary_lines
from p2pfl.runtime.runfolder import RunFolder
from p2pfl.seeding import SHARED, torch_generator

#: Round records carry ‖W_t − J‖₂ (an SVD of W_t) up to this many peers.
SPECTRAL_MAX_PEERS = 256


@dataclass
class RunContext:
    """What an algorithm sees of the run: the configuration, the graph (the support of every round's links),
    the schedule of round networks (their weights included), this rank's peers, and the message pipeline:
    `checked` (encode, exchange, validate, agree) and `gossip` (mixes over it) on top of the `transport`."""

    cfg: RunConfig
    world: World
    graph: nx.Graph
    schedule: NetworkSchedule
    placement: Placement
    transport: Transport
    checked: CheckedExchange
    gossip: Gossip
    device: torch.device
    run_dir: Path
    folder: RunFolder | None = None
    spec: Any = None  # the --peers-spec file as p2pfl.config.resolve had its owner read it, once a run
    robust: Robust = field(default_factory=lambda: Robust(frozenset()))  # attackers and the aggregator
    manifest_extra: dict[str, Any] = field(default_factory=dict)
    relay_tree: Any = None  # --gossip relay's spanning tree (p2pfl.gossip.schemes.RelayTree)
    clock: NetworkModel | None = None  # the simulated clock's network model (SPEC §9), None when off

    @property
    def n_peers(self) -> int:
        return self.placement.n_peers

    @property
    def local_peers(self) -> list[int]:
        return self.placement.peers_of(self.world.rank)

    def record_manifest(self, **entries: Any) -> None:
        """Add entries to manifest.json (the same values on every rank; rank 0 writes them)."""
        self.manifest_extra.update(entries)
        if self.folder is not None:
            self.folder.update_manifest(**entries)


@dataclass
class LocalRound:
    """What the local part of a round did on this rank: each trained peer's metrics (e.g. {"loss": ...}) and the
    peers whose update turned non-finite and were rolled back to their state before the round."""

    metrics: dict[int, dict[str, float]] = field(default_factory=dict)
    rolled_back: list[int] = field(default_factory=list)


@dataclass
class Phase:
    """What a round's exchange phase (`rejoin`, `communicate`) hands the runner: per-peer metrics, which join
    the local update's in the round record, and what its exchanges rejected and cut."""

    metrics: dict[int, dict[str, float]] = field(default_factory=dict)
    events: Events = field(default_factory=Events)


class Algorithm:
    """A method: what a peer does locally, what it sends, how it combines, how it is evaluated.

    Every round the runner calls `rejoin`, `local_updates` of the active peers and `communicate`, each given the
    round's network (p2pfl.network.RoundNetwork: links, weights, active, alive and straggling peers), and
    `evaluate` with the network of the round evaluated. The method keeps no network of its own: what a call
    uses is what it is given.
    """

    name = "base"
    headline = "loss"
    #: Its paper's values of options the user leaves unset (flags, YAML keys, make_config arguments).
    defaults: ClassVar[dict[str, Any]] = {}
    #: Options it restricts: option -> the only values it accepts (anything else is a ConfigError).
    allowed: ClassVar[dict[str, tuple[Any, ...]]] = {}
    #: The --gossip schemes it runs (p2pfl.gossip.schemes); any other is refused before training.
    gossip_schemes: ClassVar[tuple[str, ...]] = ("average",)
    #: Whether its W-weighted mix runs through Gossip.mix / the average scheme, so --compress encodes its messages.
    compressible: ClassVar[bool] = False

    @classmethod
    def runs(cls, cfg: RunConfig) -> type[Algorithm]:
        """The class that runs `cfg` under this method's name (p2pfl.algorithms.get asks; that class's defaults
        and restrictions apply): this one, unless an option hands the run to another."""
        return cls

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.cfg = ctx.cfg
        #: One record per local peer (a dataclass the method declares); checkpoints save them field by field.
        self.peers: dict[int, Any] = {}

    def evaluated(self, net: RoundNetwork) -> frozenset[int]:
        """The peers whose metrics count in `net`'s round: alive (not crashed) and honest (not --byzantine)."""
        return net.alive - self.ctx.robust.byzantine

    def eval_sample(self, net: RoundNetwork) -> frozenset[int]:
        """The peers scored one by one at the final evaluation: every evaluated peer, or with --eval-peers N a
        sample of N of them drawn from the stream (seed, SHARED, 'eval-peers'), the same on every rank."""
        alive = sorted(self.evaluated(net))
        n = self.cfg.eval_peers
        if n is None or n >= len(alive):
            return frozenset(alive)
        gen = torch_generator(self.cfg.seed, SHARED, "eval-peers")
        return frozenset(alive[i] for i in torch.randperm(len(alive), generator=gen)[:n].tolist())

    def alive_peers(self, net: RoundNetwork) -> list[int]:
        """The local peers whose metrics count (alive and honest) in `net`'s round, ascending."""
        counted = self.evaluated(net)
        return [p for p in sorted(self.peers) if p in counted]

    def setup(self) -> None:
        """Build the local peers' state (data, models). Bad input raises ValueError (reported once)."""

    def local_updates(self, peers: list[int], round: int, net: RoundNetwork) -> LocalRound:
        """The local work of the given local peers in `round` over its network `net` (none by default)."""
        return LocalRound({p: {} for p in peers})

    def local_steps(self, peer: int, net: RoundNetwork) -> float:
        """The local steps `peer` takes in the round of `net`, what the simulated clock charges its step time for
        (SPEC §9); one by default (a method's one local computation a round)."""
        return 1.0

    def rejoin(self, round: int, net: RoundNetwork) -> Phase | None:
        """Before local training: bring the peers back from sitting out (`net.rejoining`) up to date."""
        return None

    def communicate(self, round: int, net: RoundNetwork) -> Phase | None:
        """Exchange with neighbours along `net`'s links (through `ctx.checked` or `ctx.gossip`) and combine;
        returns the phase's per-peer metrics and events."""
        return None

    #: Whether --mode async runs the method (AD-PSGD: `async_vector` / `load_async_vector` read and write the
    #: vector a pair averages, and its peers' records hold a `scheme` dict, where the pending update waits).
    asynchronous: ClassVar[bool] = False

    def async_vector(self, peer: int) -> torch.Tensor:
        """A copy of the vector local `peer` averages under --mode async."""
        raise NotImplementedError

    def load_async_vector(self, peer: int, vector: torch.Tensor) -> None:
        """Set local `peer`'s averaged vector (under --mode async)."""
        raise NotImplementedError

    def attack_memory(self, peer: int, stream: str = "params") -> dict:
        """What attacker `peer` remembers across rounds of the vectors it sends on `stream` (its record's
        `attack_memory`, checkpointed with it)."""
        return self.peers[peer].attack_memory.setdefault(stream, {})

    def consensus_vectors(self) -> dict[int, torch.Tensor] | None:
        """The local peers' mixed vectors for the consensus distance (None: not applicable); the runner keeps
        those of alive peers."""
        return None

    def mixed_vector(self) -> tuple[int, torch.dtype] | None:
        """The length and dtype of the vector a peer's gossip message carries (what --compress encodes), once set
        up; None when the method mixes none. By default that of its first consensus vector."""
        vectors = self.consensus_vectors()
        if not vectors:
            return None
        first = vectors[min(vectors)]
        return first.numel(), first.dtype

    def round_metrics(self, round: int, net: RoundNetwork) -> dict[str, float] | None:
        """Network-level numbers for every round record, round 0's (the start) included (collective; rank 0's
        value is recorded; None: none, the default)."""
        return None

    def evaluate(self, round: int, final: bool, net: RoundNetwork
                 ) -> tuple[dict[str, float], dict[int, dict[str, float]]]:
        """Collective evaluation after `round`, whose network is `net`: (network-level metrics, valid on rank 0;
        per-peer metrics of the local peers still alive)."""
        return {}, {}

    def summary(self) -> dict[str, Any]:
        """Extra entries for summary.json (collective; rank 0's value is written)."""
        return {}

    def summary_lines(self, summary: Summary) -> list[str]:
        """The method's own lines of the closing summary printed by rank 0 (e.g. from its summary() entries)."""
        return []


def _merge(parts: list[dict]) -> dict:
    out: dict = {}
    for part in parts:
        out.update(part)
    return {k: out[k] for k in sorted(out)}


class Runner:
    """Drives the rounds for this rank's peers and writes what happened."""

    def __init__(self, ctx: RunContext, algorithm: Algorithm) -> None:
        self.ctx = ctx
        self.algo = algorithm
        self.world = ctx.world
        self.cfg = ctx.cfg
        self.start_time = time.time()
        self._fault_kind, self._fault_at = self._parse_fault(self.cfg.fault)
        self.first_round = 1
        #: The network of the last round run (round 0's, everyone up, before the first): what evaluations use.
        self.net: RoundNetwork = ctx.schedule.at(0)
        self._links: list[tuple[int, int]] = []  # per round: (links used, links the topology offered)
        self.sim_time = 0.0  # the simulated clock (SPEC §9) at the end of the last round, on rank 0
        self.setup_s: float | None = None  # the set-up's wall seconds, for summary.json (p2pfl.run sets it)

    @staticmethod
    def _parse_fault(spec: str | None) -> tuple[str | None, tuple[int, int] | None]:
        if spec is None:
            return None, None
        kind, who, when = parse_fault(spec)
        return kind, (who, when)

    def _inject_fault(self, round: int) -> None:
        if self._fault_kind is None or self._fault_at is None:
            return
        who, when = self._fault_at
        if round < when:
            return
        if self._fault_kind == "raise" and who == self.world.rank:
            raise RuntimeError(f"injected fault on rank {who} in round {round} (--fault)")
        if self._fault_kind == "silent" and who in self.ctx.local_peers:
            self.ctx.checked.faults.silent.add(who)
        if self._fault_kind == "nan" and who in self.ctx.local_peers:
            self.ctx.checked.faults.poisoned.add(who)
        if self._fault_kind == "diverge":  # that round only
            diverging = self.ctx.checked.faults.diverging
            diverging.discard(who)
            if round == when and who in self.ctx.local_peers:
                diverging.add(who)

    def _log(self, record: RoundStart | EvalRecord) -> None:
        if self.ctx.folder is not None:
            self.ctx.folder.log(record)

    def run(self) -> Summary | None:
        """All rounds, evaluations and the summary; returns the summary on rank 0."""
        with frozen_heap():
            return self._run_rounds()

    def _run_rounds(self) -> Summary | None:
        cfg, world = self.cfg, self.world
        rounds = self.rounds
        progress = Progress(rounds, cfg.progress and world.is_root, f"{cfg.algorithm}/{cfg.topology}")
        world.round = self.first_round - 1  # for a timeout's line: the round under way, or last done
        cd0 = self._consensus()
        start = self.algo.round_metrics(0, self.net) if self.first_round == 1 else None
        if world.is_root and self.first_round == 1:
            self._log(round_start(cd0, start, 0.0 if self.ctx.clock is not None else None))
        progress.skip(self.first_round - 1)
        signals = StopSignals().install()
        try:
            for t in range(self.first_round, rounds + 1):
                world.round = t
                record = self._round(t)
                if world.is_root:
                    progress.update(**{self.algo.headline: record.get(f"{self.algo.headline}_mean",
                                                                      record.get(self.algo.headline)),
                                       "consensus": record.get("consensus_distance")})
                if self.eval_due(t) and t != rounds:
                    self._evaluate(t, final=False)
                saved = bool(cfg.checkpoint_every) and (t % cfg.checkpoint_every == 0 or t == rounds)
                if saved:
                    self.checkpoint(t)
                if t < rounds and world.allreduce_max(float(signals.received is not None)) > 0:
                    progress.close()
                    self._preempted(t, saved, signals.name)
        finally:
            signals.restore()
        progress.close()
        final = self._evaluate(rounds, final=True)
        peaks = world.allgather(peak_bytes(self.ctx.device))
        self.ctx.record_manifest(memory_peak={"per_rank": peaks, "max_bytes": max(p["peak_bytes"] for p in peaks)})
        extra = self.algo.summary()
        if self.ctx.clock is not None:
            extra = {**extra, "sim_time_s": self.eval_time(rounds, True)}
        if self.setup_s is not None:
            extra = {**extra, "setup_s": self.setup_s}
        stats = world.gather(self.ctx.transport.stats.snapshot())
        if not world.is_root:
            return None
        summary = summary_record(
            algorithm=cfg.algorithm, topology=cfg.topology, peers=self.ctx.n_peers, rounds=rounds,
            ranks=world.size, wall_s=time.time() - self.start_time, run_dir=str(self.ctx.run_dir), final=final or {},
            consensus_distance_initial=cd0, comm_per_rank=stats or [], network=self._network_summary(), extra=extra)
        self.ctx.folder.write_summary(summary)
        print(summary_lines(summary, self.algo.summary_lines(summary)), flush=True)
        return summary

    @property
    def rounds(self) -> int:
        """How many rounds the run has."""
        return self.cfg.rounds

    def eval_due(self, t: int) -> bool:
        """Whether an evaluation follows round t (the final one aside)."""
        return bool(self.cfg.eval_every) and t % self.cfg.eval_every == 0

    def eval_time(self, t: int, final: bool) -> float | None:
        """The simulated time of the evaluation after round t: the clock's (None when the run keeps none)."""
        return self.sim_time if self.ctx.clock is not None else None

    def _preempted(self, t: int, saved: bool, signal_name: str) -> None:
        """A stop signal reached some rank: every rank checkpoints round t and exits with PREEMPTED_EXIT."""
        if not saved:
            self.checkpoint(t)
        if self.world.is_root:
            print(f"p2pfl: {signal_name} received: stopped after round {t} of {self.rounds} with a checkpoint; "
                  f"continue with --resume {self.ctx.run_dir} (exit status {PREEMPTED_EXIT})", flush=True)
            if self.ctx.folder is not None:
                self.ctx.folder.close()
        raise SystemExit(PREEMPTED_EXIT)

    def _network_summary(self) -> NetworkSummary:
        used = [u for u, _ in self._links] or [0]
        offered = [o for _, o in self._links] or [0]
        return NetworkSummary(kind=self.ctx.schedule.kind, links_per_round=sum(used) / len(used),
                              topology_links_per_round=sum(offered) / len(offered),
                              crashed=sorted(self.net.crashed))

    def checkpoint(self, round: int) -> None:
        """Save every local peer's state for `round`, then (rank 0, once every rank's files are written) the state
        file with their digests; collective."""
        digests = {peer: save_peer(self.ctx.run_dir, peer, round, record_state(self.algo.peers[peer]))
                   for peer in self.ctx.local_peers}
        gathered = self.world.gather(digests)
        if self.world.is_root:
            save_state(self.ctx.run_dir, round, self.ctx.n_peers, {p: d for part in gathered for p, d in part.items()},
                       self.checkpoint_extra())

    def checkpoint_extra(self) -> dict[str, Any] | None:
        """What the checkpoint's state file keeps of the runner besides the round: the simulated clock."""
        return {"sim_time_s": self.sim_time} if self.ctx.clock is not None else None

    def check_state(self, state: dict[str, Any]) -> None:
        """Refuse (ValueError, one line) a checkpoint this runner cannot continue; any will do here."""

    def restore(self) -> int:
        """Load the last checkpoint of the run folder; rounds continue after it. Returns its round."""
        state = load_state(self.ctx.run_dir)
        if state["peers"] != self.ctx.n_peers:
            raise ValueError(f"--resume: the checkpoint has {state['peers']} peers, this run {self.ctx.n_peers}")
        if self.world.is_root and state.get("sha256") is None:
            print(f"p2pfl: warning: --resume: {self.ctx.run_dir / 'checkpoint' / 'state.json'} records no digests of "
                  "its peer files (written by an older p2pfl): they are resumed without a check for damage",
                  flush=True)
        for peer in self.ctx.local_peers:
            saved = load_peer(self.ctx.run_dir, peer, state["round"], self.ctx.device, recorded_digest(state, peer))
            restore_record(self.algo.peers[peer], saved, self.ctx.device,
                           source=str(peer_path(self.ctx.run_dir, peer, state["round"])))
        self.check_state(state)
        self.first_round = state["round"] + 1
        self.sim_time = float(state.get("sim_time_s", 0.0))
        self.net = self.ctx.schedule.at(state["round"])
        return state["round"]

    def _consensus(self) -> float | None:
        """The consensus distance over the alive peers (collective)."""
        vectors = self.algo.consensus_vectors()
        if vectors is None:
            return None
        alive = self.algo.evaluated(self.net)
        like = next(iter(vectors.values()))
        return consensus_distance(self.world, {p: v for p, v in vectors.items() if p in alive}, len(alive), like=like)

    def network_of(self, t: int) -> RoundNetwork:
        """Round t's network: the schedule's."""
        return self.ctx.schedule.at(t)

    def phases(self, t: int, net: RoundNetwork) -> tuple[LocalRound, Events, float]:
        """What round t does over `net`: rejoin, the active peers' local updates, the exchange and mix (SPEC §2).
        Returns the local part (per-peer metrics of every phase), the exchanges' events and the local update's
        seconds."""
        ctx = self.ctx
        t0 = time.perf_counter()
        rejoined = self.algo.rejoin(t, net) or Phase()
        local = self.algo.local_updates([p for p in ctx.local_peers if p in net.active], t, net)
        local_s = time.perf_counter() - t0
        communicated = self.algo.communicate(t, net) or Phase()
        for p, metrics in communicated.metrics.items():
            local.metrics.setdefault(p, {}).update(metrics)
        return local, rejoined.events + communicated.events, local_s

    def _round(self, t: int) -> dict[str, Any]:
        ctx = self.ctx
        ts = time.perf_counter()
        net = self.net = self.network_of(t)
        schedule_s = time.perf_counter() - ts
        self._inject_fault(t)
        stats = ctx.transport.stats
        sent0, recv0 = dict(stats.peer_sent), dict(stats.peer_recv)
        links0 = dict(stats.link_sent) if ctx.clock is not None else {}
        comm0, wait0 = stats.time_comm_s, stats.time_wait_s
        t0 = time.perf_counter()
        local, events, local_s = self.phases(t, net)
        per_peer = local.metrics
        t2 = time.perf_counter()
        cd = self._consensus()
        measured = self.algo.round_metrics(t, net)
        comm = stats.time_comm_s - comm0
        wait = stats.time_wait_s - wait0
        part = {
            "per_peer": per_peer,
            "sent": {p: stats.peer_sent.get(p, 0) - sent0.get(p, 0) for p in ctx.local_peers},
            "recv": {p: stats.peer_recv.get(p, 0) - recv0.get(p, 0) for p in ctx.local_peers},
            "compute_s": t2 - t0 - comm - wait, "comm_s": comm, "wait_s": wait, "local_s": local_s,
            "rejected": list(events.rejected), "rolled_back": sorted(local.rolled_back),
            "cut": list(events.cut), "trim_lowered": list(events.lowered),
        }
        if ctx.clock is not None:
            part["steps"] = {p: self.algo.local_steps(p, net) for p in ctx.local_peers if p in net.active}
            part["links"] = {link: n - links0.get(link, 0) for link, n in stats.link_sent.items()
                             if n != links0.get(link, 0)}
        parts = self.world.gather(part)
        if not self.world.is_root:
            return {}
        rejected = sorted(pair for p in parts for pair in p["rejected"])
        used = net.without(rejected) if rejected else net  # the links whose every message was accepted
        self._links.append((used.links, net.offered))
        tr = time.perf_counter()
        network = used.record(ctx.n_peers <= SPECTRAL_MAX_PEERS)
        schedule_s += time.perf_counter() - tr
        record = round_record(
            t, time.time() - self.start_time, net.active, _merge([p["per_peer"] for p in parts]), cd,
            _merge([p["sent"] for p in parts]), _merge([p["recv"] for p in parts]),
            time_compute_s=max(p["compute_s"] for p in parts), time_comm_s=max(p["comm_s"] for p in parts),
            time_wait_s=max(p["wait_s"] for p in parts), time_local_s=max(p["local_s"] for p in parts),
            round_s=time.perf_counter() - ts, network=network, time_schedule_s=schedule_s,
            rejected=rejected,
            rolled_back=sorted(q for p in parts for q in p["rolled_back"]),
            cut=sorted(pair for p in parts for pair in p["cut"]),
            trim_lowered=sorted(pair for p in parts for pair in p["trim_lowered"]) if ctx.robust.active else None,
            extra=measured)
        if ctx.clock is not None:
            record.update(self.clock_round(t, parts))
        record = summarise_round(record, ctx.n_peers, self.cfg.peer_records)
        self._log(record)
        self._warn_nonfinite(t, record)
        return record

    def clock_round(self, t: int, parts: list[dict[str, Any]]) -> SimRound:
        """The round in simulated time (SPEC §9), from every rank's local steps and per-link bytes; advances the
        clock."""
        assert self.ctx.clock is not None
        steps = _merge([p["steps"] for p in parts])
        sizes: dict[tuple[int, int], int] = {}
        for p in parts:
            for link, n in p["links"].items():  # a link may carry several messages a round: one transfer
                sizes[link] = sizes.get(link, 0) + n
        timed = self.ctx.clock.round_time(steps, sizes)
        self.sim_time += timed.duration
        return sim_round(timed.duration, self.sim_time, timed.compute, timed.transfer, timed.idle)

    @staticmethod
    def _warn_nonfinite(t: int, record: dict[str, Any]) -> None:
        """At most one line a round on rank 0 when messages were rejected or peers rolled back."""
        parts = []
        if record["rejected"]:
            parts.append("rejected non-finite messages (receiver <- sender) "
                         + ", ".join(f"{r} <- {s}" for r, s in record["rejected"]))
        if record["rolled_back"]:
            parts.append(f"rolled back peers {record['rolled_back']} whose update turned non-finite")
        if parts:
            print(f"p2pfl: warning: round {t}: " + "; ".join(parts), flush=True)

    def _evaluate(self, t: int, final: bool) -> dict[str, float] | None:
        metrics, per_peer = self.algo.evaluate(t, final, self.net)
        parts = self.world.gather(per_peer)
        if not self.world.is_root:
            return None
        record = summarise_eval(eval_record(t, final, metrics, _merge(parts), self.eval_time(t, final)),
                                self.cfg.peer_records)
        self._log(record)
        return record["metrics"]
