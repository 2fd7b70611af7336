"""SPEC §10's spectral measures extended to a network whose W changes round by round (issue 44).

A static W is measured by |λ2(W)|, its spectral gap 1 − |λ2| and n_eff(γ) (topologies.measures). A per-round
schedule has no one W; what plays its part:
- a schedule that repeats (its topology's period T, `Cycle`) with no draw of faults or participation: the product of
  one period, P = M_T ⋯ M_1, whose rows are what each peer holds of every start after T rounds. Recorded: T, |λ2(P)|,
  the gap 1 − |λ2(P)|, n_eff(γ) of P (None where P is not symmetric, as for any W), and the rate per round
  |λ2(P)|^(1/T), the factor by which one round shrinks the distance to consensus on average over the period
  (a static W is its own period, T = 1). Exact (dense) up to topologies.measures.DENSE_MAX peers;
- any other changing network: the empirical consensus rate over its first rounds,
  ρ = (‖X_R − mean(X_R)‖_F / ‖X_0 − mean(X_0)‖_F)^(1/R), comparable with the period's rate, with X_t = M_t X_(t−1),
  X_0 a K × COLUMNS standard normal from the stream (seed, SHARED, "consensus-rate"), R = min(rounds, RATE_ROUNDS):
  deterministic, the rounds' own draws included.
M_t is round t's W after its hand-over H_t (teleport: the receiver's row of H_t picks its sender's model; H_t = I
for every other topology), so a moved model counts as it moves.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from p2pfl.network.schedule import NetworkSchedule, RoundNetwork
from p2pfl.seeding import SHARED, numpy_rng
from topologies.measures import DENSE_MAX, n_eff
from topologies.stats import second_eigenvalue_modulus

#: The rounds the empirical consensus rate is taken over (at most).
RATE_ROUNDS = 32
#: Columns of its random X.
COLUMNS = 32
#: |λ2(P)| below this is rounding: the period's product is exactly J (the eigenvalues of a computed J are ~1e-16).
EXACT = 1e-12


def round_operator(net: RoundNetwork) -> sp.csr_matrix:
    """M_t = W_t H_t: the round's mixing after its hand-over (H_t = I but for each receiver's row, e_sender)."""
    n = net.n_peers
    if not net.handover:
        return sp.csr_matrix(net.W)
    source = np.arange(n)
    for receiver, sender in net.handover.items():
        source[receiver] = sender
    h = sp.csr_matrix((np.ones(n), (np.arange(n), source)), shape=(n, n))
    return sp.csr_matrix(net.W @ h)


def period_product(schedule: NetworkSchedule, period: int) -> np.ndarray:
    """P = M_period ⋯ M_1 of the schedule's rounds 1..period, dense float64."""
    p = np.eye(schedule.n)
    for t in range(1, period + 1):
        p = round_operator(schedule.at(t)) @ p
    return p


def consensus_rate(schedule: NetworkSchedule, rounds: int) -> tuple[float, int]:
    """(ρ, R): the empirical per-round consensus rate over the first R = min(rounds, RATE_ROUNDS) rounds."""
    used = max(1, min(rounds, RATE_ROUNDS))
    x = numpy_rng(schedule.seed, SHARED, "consensus-rate").standard_normal((schedule.n, COLUMNS))
    start = float(np.sum((x - x.mean(axis=0)) ** 2))
    for t in range(1, used + 1):
        x = round_operator(schedule.at(t)) @ x
    end = float(np.sum((x - x.mean(axis=0)) ** 2))
    return (end / start) ** (0.5 / used), used


def _periodic(schedule: NetworkSchedule) -> int | None:
    """The period whose product is measured: the topology's, when no round draws faults or participation and the
    peers are few enough for the dense product; else None."""
    if schedule.dynamic is None or schedule.lossy or schedule.n > DENSE_MAX:
        return None
    return schedule.dynamic.cycle_of(schedule.n).period


def schedule_measures(schedule: NetworkSchedule, rounds: int, gamma: float) -> dict[str, Any]:
    """The topology statistics a changing network adds (module docstring): `period_product` or `consensus_rate`;
    {} for a network that does not change."""
    if schedule.kind == "static":
        return {}
    period = _periodic(schedule)
    if period is None:
        rate, used = consensus_rate(schedule, rounds)
        return {"consensus_rate": {"rate": rate, "rounds": used, "columns": COLUMNS}}
    p = period_product(schedule, period)
    lam2 = second_eigenvalue_modulus(p)
    lam2 = 0.0 if lam2 < EXACT else lam2  # P = J to rounding (Base-(k+1)): exact consensus, rate 0
    return {"period_product": {"rounds": period, "lambda2": lam2, "spectral_gap": 1.0 - lam2,
                               "n_eff": n_eff(p, gamma), "rate": lam2 ** (1.0 / period)}}
