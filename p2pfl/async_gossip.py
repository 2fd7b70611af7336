"""--mode async: asynchronous gossip (AD-PSGD, Lian et al. 2018; SPEC §9) in simulated time.

Each peer computes its local update on the model it holds, then averages pairwise with one neighbour and adds
its update: x_i, x_j <- (x_i + x_j)/2, then x_i <- x_i + Δ_i, Δ_i the local update computed from the model i held
when it started (stale when other peers' averages changed that model meanwhile). The events come from
p2pfl.network.events, a pure function of the seed and the network model, executed as batches of disjoint pairs:
each batch is one record, one "round" of the runner, with its matching as the round's network. So a run is the
same on any layout of peers over ranks, checkpoints between batches and resumes exactly, and gets the runner's
records, evaluation and plots. The pending update Δ_i lives in the peer's scheme state (checkpointed).
"""
from __future__ import annotations

import functools
import itertools
import json
import math
import time
import zlib
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from p2pfl.context import RunContext
from p2pfl.gossip import Events
from p2pfl.method import Algorithm, LocalRound
from p2pfl.network import RoundNetwork
from p2pfl.network.events import Event, batches, schedule
from p2pfl.records import AsyncRound
from p2pfl.runner import Runner
from topologies import sparse

#: The key of a peer's pending local update in its scheme state.
DELTA = "async_delta"


def pair_weights(adjacency: sp.csr_matrix, active: frozenset[int]) -> sp.csr_matrix:
    """W of a matching: ½ on each pair's entries, the identity elsewhere."""
    n = adjacency.shape[0]
    rows, cols = sparse.pairs(adjacency)
    paired = np.zeros(n, dtype=bool)
    paired[rows] = paired[cols] = True
    everyone = np.arange(n, dtype=np.int64)
    values = np.concatenate([np.full(len(rows), 0.5), np.where(paired, 0.5, 1.0)])
    return sparse.from_pairs(np.concatenate([rows, everyone]), np.concatenate([cols, everyone]), n, values,
                             np.float64)


def matching(t: int, events: list[Event], n_peers: int) -> RoundNetwork:
    """The round network of a batch of disjoint pairs: each pair hears each other, nobody else moves."""
    peer = np.array([e.peer for e in events], dtype=np.int64)
    partner = np.array([e.partner for e in events], dtype=np.int64)
    adjacency = sparse.from_pairs(np.concatenate([peer, partner]), np.concatenate([partner, peer]), n_peers)
    active = frozenset(p for e in events for p in (e.peer, e.partner))
    return RoundNetwork(round=t, adjacency=adjacency, W=pair_weights(adjacency, active), active=active,
                        alive=frozenset(range(n_peers)), fresh=active, offered=int(adjacency.nnz),
                        reweigh=pair_weights)


class AsyncRunner(Runner):
    """The runner of --mode async: its rounds are the batches of the event order."""

    def __init__(self, ctx: RunContext, algorithm: Algorithm) -> None:
        super().__init__(ctx, algorithm)
        cfg = self.cfg
        assert ctx.clock is not None, "--mode async keeps the simulated clock"
        self.base = ctx.schedule.at(0)  # everyone up: the stragglers' work fractions apply to every update
        steps: dict[int, float] = {}
        for part in self.world.allgather({p: algorithm.local_steps(p, self.base) for p in ctx.local_peers}):
            steps.update(part)
        numel, dtype = algorithm.mixed_vector() or (0, torch.float32)
        size = numel * torch.empty((), dtype=dtype).element_size()
        until = cfg.sim_time or math.inf
        updates = cfg.updates or (None if cfg.sim_time else cfg.rounds * ctx.n_peers)
        self.events = schedule(ctx.clock, ctx.graph, cfg.seed, steps, size, until=until, updates=updates)
        capped = updates is not None and len(self.events) == updates  # the updates ran out before --sim-time
        self.end_s = cfg.sim_time if cfg.sim_time and not capped else (self.events[-1].time if self.events else 0.0)
        cuts = []
        if cfg.eval_every_s:
            k = 1
            while k * cfg.eval_every_s < self.end_s:
                cuts.append(k * cfg.eval_every_s)
                k += 1
        self.batches = batches(self.events, cuts)
        self.evaluations: dict[int, float] = {}  # batch -> the evaluation time after it
        self.clocks = list(itertools.accumulate((max(e.time for e in b) for b in self.batches), max))
        starts = [min(e.time for e in b) for b in self.batches[1:]] + [math.inf]
        for t, (clock, following) in enumerate(zip(self.clocks, starts), start=1):
            due = [c for c in cuts if clock <= c < following]
            if due:  # the state after batch t is the state at each of them: first seen at the earliest
                self.evaluations[t] = due[0]
        self.last_update = {e.peer: e.update for e in self.events}
        staleness = [e.staleness for e in self.events]
        ctx.record_manifest(asynchronous={
            "events": len(self.events), "batches": len(self.batches), "end_s": self.end_s,
            "message_bytes": size, "steps_per_update": {str(p): s for p, s in sorted(steps.items())},
            "staleness_mean": sum(staleness) / len(staleness) if staleness else 0.0,
            "staleness_max": max(staleness, default=0)})

    @property
    def rounds(self) -> int:
        return len(self.batches)

    @functools.cached_property
    def plan(self) -> int:
        """A digest of the batches and evaluations: a checkpoint continues only the plan it was taken in."""
        shape = [[(e.peer, e.partner, e.update) for e in batch] for batch in self.batches]
        return zlib.crc32(json.dumps([shape, sorted(self.evaluations.items()), self.end_s]).encode())

    def checkpoint_extra(self) -> dict[str, Any]:
        return {"sim_time_s": self.sim_time, "async_plan": self.plan}

    def check_state(self, state: dict[str, Any]) -> None:
        if state.get("async_plan") != self.plan:
            raise ValueError("--resume: the asynchronous run's events differ from the checkpointed run's (resume "
                             "with its --updates, --sim-time, --eval-every-s and network model)")

    def eval_due(self, t: int) -> bool:
        return t in self.evaluations

    def eval_time(self, t: int, final: bool) -> float:
        return self.end_s if final else self.evaluations[t]

    def run(self) -> Any:
        if self.first_round == 1:
            self._start({p: 1 for p in self.ctx.local_peers if self.last_update.get(p, 0) >= 1})
        return super().run()

    def network_of(self, t: int) -> RoundNetwork:
        return matching(t, self.batches[t - 1], self.ctx.n_peers)

    def _start(self, updates: dict[int, int]) -> LocalRound:
        """Local peers begin their next local update (peer -> its number): computed now, from the model each
        holds, and kept as Δ until the peer's average ends it."""
        algo = self.algo
        out = LocalRound()
        for n in sorted(set(updates.values())):
            group = sorted(p for p, m in updates.items() if m == n)
            start = {p: algo.async_vector(p) for p in group}
            local = algo.local_updates(group, n, self.base)
            for p in group:
                algo.peers[p].scheme[DELTA] = algo.async_vector(p) - start[p]
                algo.load_async_vector(p, start[p])
            out.metrics.update(local.metrics)
            out.rolled_back += local.rolled_back
        return out

    def phases(self, t: int, net: RoundNetwork) -> tuple[LocalRound, Events, float]:
        mine = set(self.ctx.local_peers)
        batch = [e for e in self.batches[t - 1] if e.peer in mine]
        averaged = self.algo.communicate(t, net)
        for e in batch:
            self.algo.load_async_vector(e.peer, self.algo.async_vector(e.peer)
                                        + self.algo.peers[e.peer].scheme.pop(DELTA))
        t0 = time.perf_counter()
        local = self._start({e.peer: e.update + 1 for e in batch if e.update < self.last_update[e.peer]})
        return local, averaged.events if averaged is not None else Events(), time.perf_counter() - t0

    def clock_round(self, t: int, parts: list[dict[str, Any]]) -> AsyncRound:
        before = self.sim_time
        self.sim_time = self.clocks[t - 1]  # the latest event done so far
        return AsyncRound(sim_round_s=self.sim_time - before, sim_time_s=self.sim_time,
                          async_events=[[e.peer, e.partner, e.time, e.update, e.staleness]
                                        for e in self.batches[t - 1]])


__all__ = ["AsyncRunner", "matching", "pair_weights"]
