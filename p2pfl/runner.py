"""The runner: drives the synchronous rounds of SPEC §2 for the peers hosted by this rank over the network the
schedule gives each round (p2pfl.network), gathers the per-peer records to rank 0 (p2pfl.round_records), writes
the run folder, checkpoints, resumes and stops on a signal. The method (p2pfl.method.Algorithm) supplies what
differs."""
from __future__ import annotations

import logging
import time
from typing import Any

from p2pfl.context import RunContext
from p2pfl.gossip import Events, consensus_distance
from p2pfl.method import Algorithm, LocalRound, Phase
from p2pfl.network import RoundNetwork
from p2pfl.records import (
    MEAN,
    EvalRecord,
    NetworkSummary,
    RoundStart,
    SimRound,
    Summary,
    eval_record,
    round_start,
    sim_round,
    summarise_eval,
    summarise_round,
    summary_record,
)
from p2pfl.round_records import (
    SPECTRAL_MAX_PEERS,
    RoundMeter,
    assemble,
    clock_inputs,
    merge,
    nonfinite_warning,
    rejected_links,
)
from p2pfl.runtime.banner import chance_warning, run_setup
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
from p2pfl.runtime.fault_injection import InjectedFault
from p2pfl.runtime.files import save_array
from p2pfl.runtime.heap import frozen_heap
from p2pfl.runtime.memory import peak_bytes
from p2pfl.runtime.preemption import PREEMPTED_EXIT, signalled, stop_signals
from p2pfl.runtime.progress import Progress

log = logging.getLogger(__name__)

class Runner:
    """Drives the rounds for this rank's peers and writes what happened."""

    def __init__(self, ctx: RunContext, algorithm: Algorithm) -> None:
        self.ctx = ctx
        self.algo = algorithm
        self.world = ctx.world
        self.cfg = ctx.cfg
        self.start_time = time.time()
        self.fault = InjectedFault.of(self.cfg.fault)
        self.first_round = 1
        #: The network of the last round run (round 0's, everyone up, before the first): what evaluations use.
        self.net: RoundNetwork = ctx.schedule.at(0)
        self._links: list[tuple[int, int]] = []  # per round: (links used, links the topology offered)
        self.sim_time = 0.0  # the simulated clock (SPEC §9) at the end of the last round, on rank 0
        self.setup_s: float | None = None  # the set-up's wall seconds, for summary.json (p2pfl.run sets it)

    def _log(self, record: RoundStart | EvalRecord) -> None:
        if self.ctx.folder is not None:
            self.ctx.folder.log(record)

    def run(self) -> Summary | None:
        """All rounds, evaluations and the summary; returns the summary on rank 0."""
        with frozen_heap(len(self.ctx.local_peers)):
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
        with stop_signals():  # the process's, when p2pfl.run installed them at its start
            for t in range(self.first_round, rounds + 1):
                world.round = t
                record = self._round(t)
                if world.is_root:
                    headline = self.algo.headline
                    shown = headline + MEAN if headline + MEAN in record else headline
                    progress.update(**{shown: record.get(shown),
                                       "consensus_distance": record.get("consensus_distance")})
                if self.eval_due(t) and t != rounds:
                    progress.evaluated(self._evaluate(t, final=False), t)
                saved = bool(cfg.checkpoint_every) and (t % cfg.checkpoint_every == 0 or t == rounds)
                if saved:
                    self.checkpoint(t)
                stopped = signalled(world) if t < rounds else None
                if stopped is not None:
                    progress.close()
                    self._preempted(t, saved, stopped)
        progress.close()
        final = self._evaluate(rounds, final=True)
        peaks = world.allgather(peak_bytes(self.ctx.device))
        self.ctx.record_manifest(memory_peak={"per_rank": peaks, "max_bytes": max(p["peak_bytes"] for p in peaks)})
        extra = self.algo.summary()
        if self.ctx.scheme is not None:  # a scheme's own entries and arrays (a privacy ledger's), none for most
            extra = {**extra, **self.ctx.scheme.summary()}
            if world.is_root:
                for name, array in self.ctx.scheme.arrays().items():
                    save_array(self.ctx.run_dir / name, array)
        if self.ctx.clock is not None:
            extra = {**extra, "sim_time_s": self.eval_time(rounds, True)}
        if self.setup_s is not None:
            extra = {**extra, "setup_s": self.setup_s}
        stats = world.gather(self.ctx.transport.stats.snapshot())
        if not world.is_root:
            return None
        setup = run_setup(cfg, self.ctx.folder.manifest, self.algo.augmentation())
        warnings = [w for w in (chance_warning(cfg, setup, final or {}),) if w is not None]
        extra = {**extra, "run_setup": setup, "warnings": warnings}
        summary = summary_record(
            algorithm=cfg.algorithm, topology=cfg.topology, peers=self.ctx.n_peers, rounds=rounds,
            ranks=world.size, wall_s=time.time() - self.start_time, run_dir=str(self.ctx.run_dir), final=final or {},
            consensus_distance_initial=cd0, comm_per_rank=stats or [], network=self._network_summary(), extra=extra)
        self.ctx.folder.write_summary(summary)
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
            log.warning(f"{signal_name} received: stopped after round {t} of {self.rounds} with a checkpoint; "
                        f"continue with --resume {self.ctx.run_dir} (exit status {PREEMPTED_EXIT})")
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
            if self.ctx.folder is not None:
                self.ctx.folder.sync()  # the records up to `round` on the disk before the state file names it
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
            log.warning(f"--resume: {self.ctx.run_dir / 'checkpoint' / 'state.json'} records no digests of its peer "
                        "files (written by an older p2pfl): they are resumed without a check for damage")
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
        """What round t does over `net`: the models handed over (teleport), rejoin, the active peers' local updates,
        the exchange and mix (SPEC §2). Returns the local part (per-peer metrics of every phase), the exchanges'
        events and the local update's seconds."""
        ctx = self.ctx
        t0 = time.perf_counter()
        handed = self.algo.handover(t, net) or Phase()
        rejoined = self.algo.rejoin(t, net) or Phase()
        local = self.algo.local_updates([p for p in ctx.local_peers if p in net.active], t, net)
        local_s = time.perf_counter() - t0
        communicated = self.algo.communicate(t, net) or Phase()
        for p, metrics in communicated.metrics.items():
            local.metrics.setdefault(p, {}).update(metrics)
        return local, handed.events + rejoined.events + communicated.events, local_s

    def _round(self, t: int) -> dict[str, Any]:
        ctx = self.ctx
        ts = time.perf_counter()
        net = self.net = self.network_of(t)
        schedule_s = time.perf_counter() - ts
        if self.fault is not None:
            self.fault.apply(t, self.world.rank, ctx.local_peers, ctx.checked.faults)
        meter = RoundMeter(ctx.transport.stats, clock=ctx.clock is not None)
        t0 = time.perf_counter()
        local, events, local_s = self.phases(t, net)
        t2 = time.perf_counter()
        cd = self._consensus()
        measured = self.algo.round_metrics(t, net)
        own = self.ctx.scheme.round_metrics(t, net) if self.ctx.scheme is not None else None
        if own:  # the scheme's own numbers (a privacy ledger's), absent for most
            measured = {**(measured or {}), **own}
        steps = ({p: self.algo.local_steps(p, net) for p in ctx.local_peers if p in net.active}
                 if ctx.clock is not None else None)
        parts = self.world.gather(meter.share(local, events, ctx.local_peers, t2 - t0, local_s, steps))
        if not self.world.is_root:
            return {}
        rejected = rejected_links(parts)
        used = net.without(rejected) if rejected else net  # the links whose every message was accepted
        self._links.append((used.links, net.offered))
        tr = time.perf_counter()
        network = used.record(ctx.n_peers <= SPECTRAL_MAX_PEERS)
        schedule_s += time.perf_counter() - tr
        record = assemble(t, parts, net, elapsed_s=time.time() - self.start_time, consensus_distance=cd,
                          network=network, round_s=time.perf_counter() - ts, schedule_s=schedule_s,
                          rejected=rejected, robust=ctx.robust.active, extra=measured)
        if ctx.clock is not None:
            record.update(self.clock_round(t, parts))
        record = summarise_round(record, ctx.n_peers, self.cfg.peer_records)
        self._log(record)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(f"round {t}: {record['round_s']:.3f} s (local updates {record['time_local_s']:.3f} s, "
                      f"communication {record['time_comm_s']:.3f} s, waiting {record['time_wait_s']:.3f} s), "
                      f"{record['bytes_sent']} bytes sent")
        warning = nonfinite_warning(t, record)
        if warning:
            log.warning(warning)
        return record

    def clock_round(self, t: int, parts: list[dict[str, Any]]) -> SimRound:
        """The round in simulated time (SPEC §9), from every rank's local steps and per-link bytes; advances the
        clock."""
        assert self.ctx.clock is not None
        timed = self.ctx.clock.round_time(*clock_inputs(parts), exchanges=self.cfg.gossip_steps)
        self.sim_time += timed.duration
        return sim_round(timed.duration, self.sim_time, timed.compute, timed.transfer, timed.idle)

    def _evaluate(self, t: int, final: bool) -> dict[str, float] | None:
        metrics, per_peer = self.algo.evaluate(t, final, self.net)
        learnt: dict[int, dict[str, float]] = {}
        if self.ctx.curious is not None:  # what the curious peers learnt so far (collective)
            found, learnt = self.ctx.curious.evaluate(t, final, self.net)
            metrics = {**metrics, **found}
        parts = self.world.gather(per_peer)
        if not self.world.is_root:
            return None
        scored = merge(parts)
        for victim, numbers in learnt.items():
            scored[victim] = {**scored.get(victim, {}), **numbers}
        record = summarise_eval(eval_record(t, final, metrics, merge([scored]), self.eval_time(t, final)),
                                self.cfg.peer_records)
        self._log(record)
        return record["metrics"]
