"""One run's metrics.jsonl records as a tidy table: one row per value (round, kind, metric, base, model, statistic,
peer, value).

The rule is the same for every record, so a key a method adds appears without a change here:

- a number is one row, `metric` its key (nested keys joined by "."): `consensus_distance`, `network.sigma2`;
- a dict keyed by peer ids ({"0": v, ...}: `loss`, `bytes_sent_per_peer`, `network.degree`) is one row per peer,
  with `peer` set; every other row has no peer;
- an eval record's `metrics` and `per_peer` add no prefix (`test_acc_avg`; `test_acc` per peer), its
  `per_peer_stats` are named like a summarised round record's, `<name>_stats.<field>`;
- a summarised record (more peers than --peer-records) thus gives `loss_stats.mean`, `loss_stats.std`, ...,
  `loss_stats.count` where a full record gives `loss` per peer (its `loss_mean` is in both);
- strings, booleans, None and lists (the digest, `final`, `active`, `rejected`: sets of peers, not values) are
  left out; a non-finite number stays (NaN, inf: what the run recorded);
- one row is derived: a full round record's `active` list gives `active_count`, its length, the number a
  summarised record holds itself (analysis.runs.active_count), so every finished round has it.

Each row also names what its value is, in three columns, so that a groupby need not parse names (`metric_parts`):
`base` (the metric without its suffix: `test_acc` for `test_acc_avg`, `loss` for `loss_stats.mean`), `model`
("average": the network-average model, `_avg`; "untrained": the common initialisation, `_untrained`; "peer": a
peer's own model, or a statistic over the peers; None: a network-level value) and `statistic` (over the peers:
"mean", "min", "max", "std", "count", ... for `_peer_mean`, a round record's `<name>_mean` and `_stats.<field>`;
None for a value of its own). A peer's values are thus the rows with model "peer" and no statistic: a groupby over
them never counts the `_peer_*` statistics, which repeat them, twice.

Reads only the records' keys (p2pfl.records); pandas is imported here, not by `import analysis`.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

import pandas as pd

from p2pfl.records import AVG, MEAN, PEER_MAX, PEER_MEAN, PEER_MIN, STATS, UNTRAINED, numeric_leaves

#: The columns of a run's records, in order (a study frame puts its labels before them).
COLUMNS = ("round", "kind", "metric", "base", "model", "statistic", "peer", "value")
#: The `model` column's values: the network-average model, the untrained one, the peers' own.
AVERAGE, UNTRAINED_MODEL, PEER = "average", "untrained", "peer"
#: Eval metric suffixes naming a model and a statistic over the peers (p2pfl.records), longest first.
_SUFFIXES = ((PEER_MEAN, PEER, "mean"), (PEER_MIN, PEER, "min"), (PEER_MAX, PEER, "max"), (AVG, AVERAGE, None),
             (UNTRAINED, UNTRAINED_MODEL, None))
#: Keys that name a record rather than hold a value: the columns `round` and `kind`, and flags.
_STRUCTURE = frozenset({"type", "round", "summarised", "final"})
#: The number of peers that took part in a round (a summarised record's own key).
ACTIVE_COUNT = "active_count"
#: The eval record's containers whose keys are the metric names themselves.
_UNPREFIXED = ("metrics", "per_peer")

Row = tuple[int, str, str, str, "str | None", "str | None", "int | None", float]
Parts = tuple[str, "str | None", "str | None"]


def leaves(name: str, value: Any) -> Iterator[tuple[str, int | None, float]]:
    """(metric, peer, value) of every number under `value`, by the module's rule (p2pfl.records.numeric_leaves,
    the key path joined by "." after `name`)."""
    for path, peer, number in numeric_leaves(value, (name,) if name else ()):
        yield ".".join(path), peer, number


def record_values(record: Mapping[str, Any]) -> Iterator[tuple[str, int | None, float]]:
    """(metric, peer, value) of one metrics.jsonl record."""
    for key, value in record.items():
        if key in _STRUCTURE:
            continue
        if key == "active" and isinstance(value, list):
            yield ACTIVE_COUNT, None, float(len(value))
        if record.get("type") == "eval" and key in _UNPREFIXED:
            yield from leaves("", value)
        elif record.get("type") == "eval" and key == "per_peer_stats":
            for name, stats in value.items():
                yield from leaves(name + STATS, stats)
        else:
            yield from leaves(key, value)


def _per_peer_names(record: Mapping[str, Any]) -> set[str]:
    """The names of a record's per-peer values: a round record's {peer: value} fields and `<name>_stats`, an eval
    record's per-peer metrics (their `_avg`-like endings are part of the name: `drift_to_avg`)."""
    if record.get("type") == "eval":
        return {k for m in (record.get("per_peer") or {}).values() for k in m} | set(record.get("per_peer_stats")
                                                                                       or {})
    return {k for k, v in record.items() if isinstance(v, dict)} | {k.removesuffix(STATS) for k in record
                                                                   if k.endswith(STATS)}


def metric_parts(metric: str, peer: int | None, per_peer: AbstractSet[str] = frozenset()) -> Parts:
    """(base, model, statistic) of one row (the module's rule); `per_peer` the record's per-peer names, which
    tell a round record's `<name>_mean` (a mean over the peers of `<name>`) from a metric that ends so."""
    if peer is not None:
        return metric, PEER, None
    head, dot, field = metric.rpartition(".")
    if dot and head.endswith(STATS):
        return head.removesuffix(STATS), PEER, field
    if metric.endswith(MEAN) and metric.removesuffix(MEAN) in per_peer:
        return metric.removesuffix(MEAN), PEER, "mean"
    if metric not in per_peer:
        for suffix, model, statistic in _SUFFIXES:
            if metric.endswith(suffix) and len(metric) > len(suffix):
                return metric.removesuffix(suffix), model, statistic
    return metric, None, None


def record_rows(records: Iterable[Mapping[str, Any]]) -> list[Row]:
    """The rows of `records` (round and eval records, in file order)."""
    rows: list[Row] = []
    for r in records:
        per_peer = _per_peer_names(r)
        rows += [(int(r["round"]), str(r["type"]), metric, *metric_parts(metric, peer, per_peer), peer, value)
                 for metric, peer, value in record_values(r)]
    return rows


def records_table(rows: list[tuple], columns: Iterable[str]) -> pd.DataFrame:
    """A frame of `rows` with `columns`: `peer` as a nullable integer, `value` as float."""
    table = pd.DataFrame(rows, columns=list(columns))
    return table.astype({"round": "int64", "peer": "Int64", "value": "float64"})
