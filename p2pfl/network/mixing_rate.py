"""SPEC §10's p of a network that changes (dynamic or resampled topologies, link failures, participation, churn,
crashes): 1 − the mean over its rounds of one gossip step's contraction ‖W_t X − X̄‖² / ‖X − X̄‖² on random X.

Over the alive peers of round t (crashed ones are out of every metric; a peer sitting out keeps its row of the
identity, so it slows the contraction as it does in the run), X is K_t × COLUMNS standard normal from the
stream (seed, SHARED, "p-estimate"): the estimate is deterministic. Every round of the run is used, or with more
than ESTIMATE_ROUNDS rounds that many evenly spaced ones. Its expectation is the mean of ‖W_t − J‖_F²/(K_t − 1)
(topologies.measures.expected_contraction): an average over X, not the worst case the closed-form p bounds.
"""
from __future__ import annotations

import numpy as np

from p2pfl.network.schedule import NetworkSchedule
from p2pfl.seeding import SHARED, numpy_rng
from topologies.measures import contraction

#: At most this many rounds enter the estimate (evenly spaced over the run).
ESTIMATE_ROUNDS = 256
#: Columns of each round's random X (more columns, less noise: the ratio concentrates).
COLUMNS = 32


def changes(schedule: NetworkSchedule) -> bool:
    """Whether the network's W differs between rounds (then p is estimated, not the closed form of one W)."""
    return (schedule.kind != "static" or schedule.participation < 1.0 or schedule.churn > 0.0
            or schedule.link_failure > 0.0 or bool(schedule.crashes))


def sampled_rounds(rounds: int) -> list[int]:
    """The rounds 1..`rounds`, or ESTIMATE_ROUNDS of them evenly spaced."""
    if rounds <= ESTIMATE_ROUNDS:
        return list(range(1, rounds + 1))
    return sorted({int(t) for t in np.linspace(1, rounds, ESTIMATE_ROUNDS).round()})


def estimate_p(schedule: NetworkSchedule, rounds: int) -> tuple[float, int]:
    """(1 − the mean random-X contraction over the sampled rounds, how many rounds it used)."""
    rng = numpy_rng(schedule.seed, SHARED, "p-estimate")
    ratios = []
    for t in sampled_rounds(max(1, rounds)):
        net = schedule.at(t)
        keep = sorted(net.alive)
        x = rng.standard_normal((len(keep), COLUMNS))
        ratios.append(contraction(net.W[keep][:, keep], x))
    return 1.0 - float(np.mean(ratios)), len(ratios)


def network_p(schedule: NetworkSchedule, rounds: int) -> dict[str, float | str]:
    """The topology statistics' `p` and `p_source` of a changing network; {} for one that does not change (its
    closed form stands)."""
    if not changes(schedule):
        return {}
    p, used = estimate_p(schedule, rounds)
    return {"p": p, "p_source": f"random-X estimate over {used} rounds ({COLUMNS} columns)"}
