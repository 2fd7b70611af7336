"""--mode async (AD-PSGD in simulated time, SPEC §9): the event order is a pure function of the seed and the
network model; pairwise averaging keeps consensus's mean and converges; a run equals a direct simulation of its
recorded events; equal step times and no latency give synchronous steps of disjoint pairs; the same records on
1, 2 and 4 ranks; a resumed run equals an uninterrupted one."""
from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import torch

from p2pfl.async_gossip import AsyncRunner
from p2pfl.method import LocalRound
from p2pfl.network.events import batches, schedule
from p2pfl.network.timing import NetworkModel
from p2pfl.run import main
from p2pfl.seeding import numpy_rng, torch_generator

from conftest import run_job, same_records_on_ranks
from golden_cases import normalise
from helpers_inproc import setup_algorithm


def model(compute: list[float], latency: float = 0.0) -> NetworkModel:
    k = len(compute)
    return NetworkModel(np.array(compute, dtype=float), np.full((k, k), latency), np.full(k, np.inf),
                        np.full(k, np.inf))


def test_equal_step_times_and_no_latency_give_synchronous_steps_of_disjoint_pairs() -> None:
    graph = nx.cycle_graph(8)
    events = schedule(model([0.5] * 8), graph, 4, dict.fromkeys(range(8), 2.0), 1000, updates=8 * 6)
    for e in events:  # every peer's n-th average at n · E · c
        assert e.time == e.update * 2 * 0.5
    per_peer = {p: [e.update for e in events if e.peer == p] for p in range(8)}
    assert per_peer == {p: list(range(1, 7)) for p in range(8)}
    done = batches(events)
    for batch in done:
        ends = [p for e in batch for p in (e.peer, e.partner)]
        assert len(ends) == len(set(ends))  # disjoint pairs
    assert sorted(e for b in done for e in b) == sorted(events)
    assert len(done) < len(events) / 2  # pairs run together


def test_batches_keep_each_peers_order_and_run_disjoint_pairs_together() -> None:
    """A brute force: executing the batches one after another touches each peer's events in the schedule's order,
    and each event sits in the first batch after every earlier event that shares a peer with it."""
    events = schedule(model([1.0, 1.3, 0.7, 1.1, 0.9, 1.2]), nx.complete_graph(6), 3, dict.fromkeys(range(6), 1.0),
                      8, updates=60)
    done = batches(events)
    where = {id(e): b for b, batch in enumerate(done) for e in batch}
    for idx, e in enumerate(events):
        earlier = [where[id(f)] for f in events[:idx] if {f.peer, f.partner} & {e.peer, e.partner}]
        assert where[id(e)] == max(earlier, default=-1) + 1


def test_the_order_is_each_peers_own_draws_and_staleness_counts_the_averages_in_between() -> None:
    """A brute force of the definition: peer i's n-th average ends at the sum of its computes and pair
    transfers so far, with the partner drawn from (seed, i, 'async/<n>'); its staleness is how many averages
    with i as partner came between its previous average and this one in the order."""
    k, seed, size = 6, 9, 4000
    graph = nx.random_regular_graph(3, k, seed=1)
    rng = np.random.default_rng(0)
    latency = rng.uniform(0.0, 0.2, (k, k))
    net = NetworkModel(rng.uniform(0.5, 2.0, k), latency, rng.uniform(1e4, 1e5, k), rng.uniform(1e4, 1e5, k))
    steps = {p: float(1 + p % 2) for p in range(k)}
    events = schedule(net, graph, seed, steps, size, until=20.0)
    expected = []
    for p in range(k):
        nbrs, t, n = sorted(graph.neighbors(p)), 0.0, 1
        while True:
            j = nbrs[int(numpy_rng(seed, p, f"async/{n}").integers(len(nbrs)))]
            bw_ij = min(net.upload[p], net.download[j])
            bw_ji = min(net.upload[j], net.download[p])
            t = t + steps[p] * net.compute[p] + max(latency[p, j] + size / bw_ij, latency[j, p] + size / bw_ji)
            if t > 20.0:
                break
            expected.append((t, p, j, n))
            n += 1
    expected.sort()
    assert [(e.peer, e.partner, e.update) for e in events] == [x[1:] for x in expected]
    assert [e.time for e in events] == pytest.approx([x[0] for x in expected], rel=1e-12)
    last: dict[int, int] = {}
    for idx, e in enumerate(events):
        between = events[last.get(e.peer, -1) + 1:idx]
        assert e.staleness == sum(1 for f in between if f.partner == e.peer)
        last[e.peer] = idx
    assert any(e.staleness > 0 for e in events)


def test_batches_respect_the_evaluation_cuts() -> None:
    events = schedule(model([1.0, 1.3, 0.7, 1.1, 0.9]), nx.complete_graph(5), 2, dict.fromkeys(range(5), 1.0), 8,
                      updates=40)
    for cut in (2.0, 5.0):
        for batch in batches(events, [2.0, 5.0]):
            assert all(e.time <= cut for e in batch) or all(e.time > cut for e in batch)
    assert sorted(e for b in batches(events, [2.0, 5.0]) for e in b) == sorted(events)


CONSENSUS = {"algorithm": "consensus", "peers": 8, "topology": "cycle", "vector_size": 64, "vector_dtype": "float64",
             "mode": "async", "compute_time": 1.0, "compute_spread": 0.5, "latency": 0.05, "updates": 400, "seed": 6}


def test_async_consensus_equals_a_direct_simulation_keeps_the_mean_and_converges(tmp_path: Path) -> None:
    algo = setup_algorithm(tmp_path, **CONSENSUS)
    runner = AsyncRunner(algo.ctx, algo)
    runner.run()
    records = [json.loads(line) for line in (algo.ctx.run_dir / "metrics.jsonl").read_text().splitlines()]
    logged = [e for r in records if r["type"] == "round" and r["round"] > 0 for e in r["async_events"]]
    assert sorted(tuple(e[:2]) for e in logged) == sorted((e.peer, e.partner) for e in runner.events)
    initial = torch.stack([torch.randn(64, generator=torch_generator(6, p, "init"), dtype=torch.float64)
                           for p in range(8)])
    x = dict(enumerate(initial.clone()))
    for i, j, *_ in logged:  # the recorded order, one pair at a time
        avg = (x[i] + x[j]) / 2
        x[i], x[j] = avg, avg.clone()
    for p in range(8):
        assert torch.allclose(algo.peers[p].x, x[p], rtol=1e-12, atol=1e-12)
    final, start = torch.stack([algo.peers[p].x for p in range(8)]), initial.mean(0)
    assert torch.allclose(final.mean(0), start, rtol=0, atol=1e-13)  # pairwise averaging keeps the mean
    assert (final - start).norm() < 1e-3 * (initial - start).norm()  # and reaches it


@pytest.mark.mpi
def test_async_runs_agree_on_1_2_and_4_ranks(tmp_path: Path) -> None:
    records = same_records_on_ranks("tests/mpi/async_runs.py", tmp_path)
    assert set(records) == {"consensus", "fedavg"}
    fedavg = records["fedavg"]
    assert [r["sim_time_s"] for r in fedavg if r["type"] == "eval"] == [4.0, 8.0, 12.0]
    assert any(e[4] > 0 for r in fedavg if r["type"] == "round" and r["round"] > 0 for e in r["async_events"])


TRAINING = ["--algorithm", "fedavg", "--mode", "async", "--peers", "5", "--topology", "cycle", "--dataset",
            "synthetic", "--train-subset", "200", "--batch-size", "16", "--local-steps", "2", "--optimizer", "sgd",
            "--lr", "0.02", "--compute-time", "1", "--compute-spread", "0.3", "--updates", "30", "--eval-every-s",
            "3", "--checkpoint-every", "4", "--no-progress", "--no-plots", "--batch-peers", "off", "--seed", "8"]


def test_a_resumed_async_run_equals_an_uninterrupted_one(tmp_path: Path) -> None:
    assert main([*TRAINING, "--out", str(tmp_path), "--name", "full"]) == 0
    proc = run_job(["-m", "p2pfl.run", *TRAINING, "--out", str(tmp_path), "--name", "part", "--fault", "raise@0:6"],
                   ranks=0)
    assert proc.returncode != 0 and "injected fault" in proc.stderr
    proc = run_job(["-m", "p2pfl.run", *TRAINING, "--resume", str(tmp_path / "part")], ranks=0)
    assert proc.returncode == 0, proc.stderr[-2000:]
    full, part = normalise(tmp_path / "full" / "metrics.jsonl"), normalise(tmp_path / "part" / "metrics.jsonl")
    assert part == full
    assert any(r.get("loss_mean") for r in full)


def test_each_update_is_computed_from_the_model_its_peer_held_when_it_started(tmp_path: Path) -> None:
    """Consensus with a deterministic local update x <- 0.9 x + 0.01 (p + 1) n (n: the update's number) against a
    direct simulation of the schedule, one event at a time: Δ_i = f(x_i) − x_i taken when i's update starts,
    added to i alone after its average; stale updates (a partner's average in between) included."""
    algo = setup_algorithm(tmp_path, **{**CONSENSUS, "updates": 120})

    def f(x: torch.Tensor, p: int, n: int) -> torch.Tensor:
        return 0.9 * x + 0.01 * (p + 1) * n

    def local_updates(peers: list[int], round: int, net) -> LocalRound:
        for p in peers:
            algo.peers[p].x = f(algo.peers[p].x, p, round)
        return LocalRound({p: {} for p in peers})

    algo.local_updates = local_updates
    runner = AsyncRunner(algo.ctx, algo)
    runner.run()
    x = {p: torch.randn(64, generator=torch_generator(6, p, "init"), dtype=torch.float64) for p in range(8)}
    last = {e.peer: e.update for e in runner.events}
    delta = {p: f(x[p], p, 1) - x[p] for p in last}
    for e in runner.events:
        i, j = e.peer, e.partner
        x[i] = x[j] = (x[i] + x[j]) / 2
        x[i] = x[i] + delta.pop(i)
        if e.update < last[i]:
            delta[i] = f(x[i], i, e.update + 1) - x[i]
    assert any(e.staleness for e in runner.events)
    for p in range(8):
        assert torch.allclose(algo.peers[p].x, x[p], rtol=1e-10, atol=1e-10), p


def test_evaluations_follow_every_event_before_them_and_none_after(tmp_path: Path) -> None:
    """Peers of unequal speed (a trace: 1, 1, 3, 3 s a step) evaluated every 0.5 s: each evaluation comes after
    the batch holding the last event at or before its time and before any later event, stamped with the earliest
    evaluation time that state is seen at."""
    trace = tmp_path / "trace.csv"
    trace.write_text("1\n1\n3\n3\n")
    algo = setup_algorithm(tmp_path, algorithm="consensus", peers=4, topology="cycle", vector_size=8,
                           mode="async", compute_trace=str(trace), updates=20, eval_every_s=0.5)
    runner = AsyncRunner(algo.ctx, algo)
    assert runner.evaluations
    for t, at in runner.evaluations.items():
        assert at * 2 == int(at * 2)  # a multiple of 0.5
        done = [e for b in runner.batches[:t] for e in b]
        later = [e for b in runner.batches[t:] for e in b]
        assert all(e.time <= at for e in done) and all(e.time > at for e in later)
        assert at - 0.5 < max(e.time for e in done)  # the earliest cut after the state's last event


def test_a_resume_with_other_events_is_refused(tmp_path: Path) -> None:
    base = ["--algorithm", "consensus", "--peers", "6", "--vector-size", "20", "--mode", "async", "--compute-time",
            "1", "--compute-spread", "0.3", "--checkpoint-every", "3", "--no-progress", "--no-plots"]
    assert main([*base, "--updates", "30", "--out", str(tmp_path), "--name", "run"]) == 0
    proc = run_job(["-m", "p2pfl.run", *base, "--updates", "40", "--resume", str(tmp_path / "run")], ranks=0)
    assert proc.returncode == 2
    assert "the asynchronous run's events differ from the checkpointed run's" in proc.stderr
