"""FedMuscle's multi-task metric Δ% against local training (SPEC §6)."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from .runs import is_number

__all__ = ["Delta", "delta_percent", "lower_is_better"]


class Delta(NamedTuple):
    """Per-peer Δ% (keyed by peer id as a string) and their mean (SPEC §6's Δ)."""

    per_peer: dict[str, float]
    mean: float


def lower_is_better(metric_name: str | None) -> bool:
    """Whether a smaller value of the metric is better: names ending in "loss" or "error" (e.g. val_loss)."""
    if not metric_name:
        return False
    name = metric_name.strip().lower()
    return name.endswith("loss") or name.endswith("error")


def _as_peer_map(values: Mapping | Sequence, what: str) -> dict[str, float]:
    items = values.items() if isinstance(values, Mapping) else enumerate(values)
    out: dict[str, float] = {}
    for peer, value in items:
        if not is_number(value):
            raise ValueError(f"delta_percent: {what} for peer {peer!r} is {value!r}, expected a number")
        out[str(peer)] = float(value)
    return out


def delta_percent(method_metrics: Mapping | Sequence, local_metrics: Mapping | Sequence,
                  lower_is_better: bool | Mapping = False) -> Delta:
    """FedMuscle's multi-task improvement over local training, per peer and averaged (SPEC §6).

    Δ_n = (M_n − M_n^local) / M_n^local × 100, negated where lower is better; mean Δ = (1/K) Σ_n Δ_n.
    ``method_metrics`` and ``local_metrics`` map peer → metric (or are sequences indexed by peer) and must
    cover the same peers; ``lower_is_better`` is one flag for all peers or a map peer → flag (peers may have
    different tasks). A peer whose local metric is 0 gets Δ = nan (the ratio is undefined), and so does the mean.
    """
    method = _as_peer_map(method_metrics, "method metric")
    local = _as_peer_map(local_metrics, "local metric")
    if set(method) != set(local):
        raise ValueError(
            "delta_percent: method and local metrics must cover the same peers; only in method: "
            f"{sorted(set(method) - set(local))}, only in local: {sorted(set(local) - set(method))}")
    if not method:
        raise ValueError("delta_percent: no peers given")
    flags = {str(k): bool(v) for k, v in lower_is_better.items()} if isinstance(lower_is_better, Mapping) else {}
    per_peer: dict[str, float] = {}
    for peer in sorted(method, key=lambda p: (0, int(p), "") if p.lstrip("-").isdigit() else (1, 0, p)):
        m, base = method[peer], local[peer]
        flip = flags.get(peer, False) if isinstance(lower_is_better, Mapping) else bool(lower_is_better)
        if base == 0:
            per_peer[peer] = math.nan
            continue
        d = (m - base) / base * 100.0
        per_peer[peer] = -d if flip else d
    mean = sum(per_peer.values()) / len(per_peer)
    return Delta(per_peer, mean)
