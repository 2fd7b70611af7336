"""One run's metrics.jsonl records as a tidy table: one row per value (round, kind, metric, peer, value).

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

Reads only the records' keys (p2pfl.records); pandas is imported here, not by `import analysis`.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pandas as pd

from p2pfl.records import STATS, numeric_leaves

#: The columns of a run's records, in order (a study frame puts its labels before them).
COLUMNS = ("round", "kind", "metric", "peer", "value")
#: Keys that name a record rather than hold a value: the columns `round` and `kind`, and flags.
_STRUCTURE = frozenset({"type", "round", "summarised", "final"})
#: The number of peers that took part in a round (a summarised record's own key).
ACTIVE_COUNT = "active_count"
#: The eval record's containers whose keys are the metric names themselves.
_UNPREFIXED = ("metrics", "per_peer")

Row = tuple[int, str, str, "int | None", float]


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


def record_rows(records: Iterable[Mapping[str, Any]]) -> list[Row]:
    """The rows of `records` (round and eval records, in file order)."""
    return [(int(r["round"]), str(r["type"]), metric, peer, value)
            for r in records for metric, peer, value in record_values(r)]


def records_table(rows: list[tuple], columns: Iterable[str]) -> pd.DataFrame:
    """A frame of `rows` with `columns`: `peer` as a nullable integer, `value` as float."""
    table = pd.DataFrame(rows, columns=list(columns))
    return table.astype({"round": "int64", "peer": "Int64", "value": "float64"})
