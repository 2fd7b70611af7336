"""Reading run folders (``runs/<time>-<algorithm>-<topology>/``, see docs/CONVENTIONS.md).

A run folder holds ``config.yaml`` and ``manifest.json`` (written at start), ``metrics.jsonl`` (one JSON
record per line, appended as rounds finish) and ``summary.json`` (written at the end); their records are those
of ``p2pfl.records``, and ``Run`` reads exactly those keys. ``load_run`` reads whatever is there, so it also
works on a run that is still in progress: no summary yet, and a last ``metrics.jsonl`` line that may be cut off
mid-write (it is skipped).
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import yaml

from p2pfl.fedmuscle.records import PeerSpecEntry
from p2pfl.records import (
    SIM_TIME,
    STATS,
    SUMMARISED,
    EvalRecord,
    Manifest,
    PeerStats,
    RoundRecord,
    RoundStart,
    SummarisedRound,
    Summary,
    TopologyRecord,
    is_failed,
)
from p2pfl.runtime.files import loads
from p2pfl.yamlfile import safe_load

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Run", "RunFolderError", "load_run", "is_number", "cumulative_bytes_per_peer", "active_count", "ROUND"]

#: The parameter of each partition kind that has one, for runs whose manifest names no label (older runs).
PARTITION_PARAMETER = {"dirichlet": "alpha", "skew": "beta"}
#: The records' round index (for --mode async, the index of a batch of events): the default x of a series.
ROUND = "round"

#: A spectral prediction's one-round factor above 1 + this rises (σ2 = 1 computed as 1 + 4e-16 does not).
RISE_TOLERANCE = 1e-9


def active_count(record: RoundRecord | SummarisedRound) -> int:
    """How many peers took part in a round, from its `active` list or, in a summarised record, `active_count`."""
    return record["active_count"] if record.get(SUMMARISED) else len(record["active"])  # type: ignore[typeddict-item]


def _peer_count(record: RoundRecord | SummarisedRound, key: str) -> int:
    """How many peers a round record's per-peer field `key` covers (a summarised record: its PeerStats')."""
    if record.get(SUMMARISED):
        stats: PeerStats = record[key + STATS]  # type: ignore[literal-required]
        return stats["count"] + stats["nonfinite"]
    return len(record[key])  # type: ignore[literal-required]


class RunFolderError(ValueError):
    """A path given as a run folder is not one, or one of its files cannot be read."""


def is_number(value: Any) -> bool:
    """True for a real, finite-or-not int/float that is not a bool (what can be plotted or tabulated)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass
class Run:
    """One run folder, as read from disk.

    ``config`` is config.yaml (``RunConfig.to_dict()``); ``manifest`` is None until written; ``rounds`` and
    ``evals`` are the ``metrics.jsonl`` records of type ``round`` and ``eval``, in file order; ``summary`` is
    None while the run is still in progress and when it failed (then ``failure`` says why). Non-finite numbers
    read back as floats, whether written as the strings "NaN", "Infinity", "-Infinity" or bare (older files).
    """

    path: Path
    config: dict[str, Any] = field(default_factory=dict)
    manifest: Manifest | None = None
    rounds: list[RoundStart | RoundRecord | SummarisedRound] = field(default_factory=list)
    evals: list[EvalRecord] = field(default_factory=list)
    summary: Summary | None = None
    failure: str | None = None  # the reason a failed run's summary.json gives (its summary is then None)

    # ----- identity -------------------------------------------------------------------------------------
    @property
    def state(self) -> str:
        """"done" (a summary), "failed" (its summary.json says so, with `failure`) or "unfinished" (running,
        stopped or killed)."""
        return "done" if self.summary is not None else "failed" if self.failure is not None else "unfinished"

    @property
    def name(self) -> str:
        """The folder name, which is how runs are told apart in reports."""
        return self.path.name

    @property
    def title(self) -> str:
        """How figures name the run: its method, topology, peers and data partition (not its folder name)."""
        parts = [f"{self.config.get('algorithm', '?')} on {self.config.get('topology', '?')}",
                 f"{self.config.get('peers', '?')} peers"]
        return ", ".join(parts + ([self.partition_label] if self.partition_label else []))

    @property
    def algorithm(self) -> str:
        return self.config["algorithm"]

    @property
    def topology_name(self) -> str:
        return self.config["topology"]

    @property
    def num_peers(self) -> int:
        """K (the config records the resolved number)."""
        return self.config["peers"]

    @property
    def planned_rounds(self) -> int:
        """The number of rounds the config asks for."""
        return self.config["rounds"]

    @property
    def partition_label(self) -> str | None:
        """``dirichlet(alpha=0.5)``-style description of the data partition; None for a method without data."""
        part = self.manifest.get("partition") if self.manifest else None
        if part is None:
            return None
        if "label" in part:  # the partition's own (p2pfl.data.partitions); older runs: the rule below
            return part["label"]
        param = PARTITION_PARAMETER.get(part["kind"])
        return f"{part['kind']}({param}={part[param]})" if param else part["kind"]

    @property
    def rounds_done(self) -> int:
        """The highest round number recorded so far (0 when none is)."""
        return max((r["round"] for r in self.rounds), default=0)

    # ----- recorded data -----------------------------------------------------------------------------------
    @property
    def peers_spec(self) -> list[PeerSpecEntry] | None:
        """manifest["peers_spec"]: one entry per peer, in peer order (runs with --peers-spec)."""
        return self.manifest.get("peers_spec") if self.manifest else None

    @property
    def class_counts(self) -> list[list[int]] | None:
        """manifest["partition"]["class_counts"] (peers x classes), when the data is partitioned."""
        part = self.manifest.get("partition") if self.manifest else None
        return part["class_counts"] if part else None

    @property
    def topology(self) -> TopologyRecord | None:
        """manifest["topology"] (``edges``, ``weights`` or an older run's ``mixing``, ``stats``; W by
        topologies.stats.mixing_of), None until the manifest is written."""
        return self.manifest["topology"] if self.manifest else None

    def final_eval(self) -> EvalRecord | None:
        """The last eval record (the most recent evaluation), or None."""
        return self.evals[-1] if self.evals else None

    @property
    def summarised(self) -> bool:
        """Whether the run summarised its per-peer records (more peers than --peer-records): its per-peer
        plots and tables are then drawn from, or left for, the statistics over peers."""
        return any(r.get(SUMMARISED) for r in (*self.rounds, *self.evals))

    def peer_band(self, name: str) -> tuple[list[float], list[float], list[float]]:
        """(rounds, min, max) over the peers of a per-peer round metric, from the summarised records'
        `<name>_stats` or the full records' {peer: value} (finite values only; rounds without one left out)."""
        xs: list[float] = []
        lo: list[float] = []
        hi: list[float] = []
        for record in self.rounds:
            if record.get(SUMMARISED):
                stats = record.get(name + STATS) or {}
                low, high = stats.get("min"), stats.get("max")
            else:
                finite = [float(v) for v in (record.get(name) or {}).values() if is_number(v) and math.isfinite(v)]
                low, high = (min(finite), max(finite)) if finite else (None, None)
            if is_number(low) and is_number(high):
                xs.append(float(record[ROUND]))
                lo.append(float(low))
                hi.append(float(high))
        return xs, lo, hi

    def final_per_peer(self) -> dict[str, dict] | None:
        """The per-peer metrics of the last eval record that has them, keyed by peer id as a string (a
        summarised eval record has none: see its `per_peer_stats`)."""
        for record in reversed(self.evals):
            if record["per_peer"]:
                return record["per_peer"]
        return None

    def final_metrics(self) -> dict[str, float]:
        """The metrics of the last eval record."""
        record = self.final_eval()
        return dict(record["metrics"]) if record else {}

    def frame(self) -> pd.DataFrame:
        """The records as a tidy pandas DataFrame, one row per value: round, kind ("round" or "eval"), metric,
        peer (None for a network-level value) and value, rounds in order, a round's eval after its round record
        (the rule: analysis.tidy; many runs or a study: analysis.frame)."""
        from .tidy import COLUMNS, record_rows, records_table

        records = sorted([*self.rounds, *self.evals], key=lambda r: r["round"])
        return records_table(record_rows(records), COLUMNS)

    def bytes_sent_per_peer_round(self) -> float | None:
        """Mean bytes one peer sends in one round: each round's ``bytes_sent`` (the total over its active
        peers) divided by the number of active peers, averaged over the rounds recorded."""
        per_round = [r["bytes_sent"] / active_count(r) for r in self.rounds if r["round"] > 0]
        return sum(per_round) / len(per_round) if per_round else None

    def wall_time_s(self) -> float | None:
        """Wall time of the run: the summary's, else the ``elapsed_s`` (time since start) of the last round."""
        if self.summary is not None:
            return self.summary["wall_s"]
        return self.rounds[-1]["elapsed_s"] if self.rounds else None

    @staticmethod
    def prediction_rises(prediction: tuple[list[float], list[float]]) -> bool:
        """Whether a spectral prediction rises in some round (σ2(W_t)² > 1 beyond rounding: a row-stochastic W that
        is not doubly stochastic, EL-Local's), so that it bounds nothing. A factor of exactly 1 (a doubly
        stochastic round whose graph is disconnected: a permutation round of the one-peer exponential graph)
        keeps it flat, still a bound."""
        ys = prediction[1]
        return any(b > a * (1.0 + RISE_TOLERANCE) for a, b in zip(ys, ys[1:]) if a > 0)

    def spectral_prediction(self) -> tuple[list[float], list[float]] | None:
        """(rounds, c·Π_{t0<s<=t} σ2(W_s)²): what gossip alone would leave, from the first positive consensus
        distance c (round t0; round 0 for consensus, later for runs that start from a common model), over the
        graphs actually used (each round record's ``network.sigma2``); None without those records."""
        start = next((r for r in self.rounds if is_number(r.get("consensus_distance"))
                      and float(r["consensus_distance"]) > 0), None)
        if start is None:
            return None
        used = [r for r in self.rounds if r["round"] > start["round"] and "sigma2" in (r.get("network") or {})]
        if not used:
            return None
        value = float(start["consensus_distance"])
        xs, ys = [float(start["round"])], [value]
        for record in used:
            value *= float(record["network"]["sigma2"]) ** 2
            xs.append(float(record["round"]))
            ys.append(value)
        return xs, ys

    def mean_degree(self) -> dict[str, float]:
        """Each peer's in-degree averaged over the rounds it took part in (``network.degree``; empty for a
        summarised run, whose records hold ``network.degree_stats`` instead)."""
        total: dict[str, list[int]] = {}
        for record in self.rounds:
            for peer, degree in ((record.get("network") or {}).get("degree") or {}).items():
                total.setdefault(peer, []).append(degree)
        return {peer: sum(v) / len(v) for peer, v in total.items()}

    @property
    def has_sim_time(self) -> bool:
        """Whether the run had the simulated clock on: its round or eval records carry ``sim_time_s``."""
        return any(is_number(r.get(SIM_TIME)) for r in (*self.rounds, *self.evals))

    def series(self, key: str, source: str = "rounds", x: str = ROUND) -> tuple[list[float], list[float]]:
        """(xs, values) of a numeric field of the round records, or of an eval metric (source="evals"), against
        the records' ``x``: the round, or ``sim_time_s`` (records without it are left out)."""
        xs: list[float] = []
        ys: list[float] = []
        for record in self.rounds if source == "rounds" else self.evals:
            value = record.get(key) if source == "rounds" else record["metrics"].get(key)
            at = record.get(x)
            if is_number(value) and not math.isnan(float(value)) and is_number(at):
                xs.append(float(at))
                ys.append(float(value))
        return xs, ys


def cumulative_bytes_per_peer(run: Run) -> dict[float, float]:
    """Round -> bytes one peer sent up to that round: the sum over rounds of bytes_sent / active peers (for an
    asynchronous run, whose rounds are batches of a few pairs, / all peers: every peer takes part in the run)."""
    total, out = 0.0, {0.0: 0.0}
    for record in sorted((r for r in run.rounds if r["round"] > 0), key=lambda r: r["round"]):
        peers = _peer_count(record, "bytes_sent_per_peer") if "async_events" in record else active_count(record)
        total += record["bytes_sent"] / max(peers, 1)
        out[float(record["round"])] = total
    return out


def _read_mapping(path: Path, parse: Callable[[IO[str]], Any], errors: tuple[type[Exception], ...],
                  what: str) -> dict | None:
    """The mapping a JSON or YAML file holds; None when the file is absent."""
    if not path.is_file():
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            data = parse(fh)
    except (OSError, *errors) as exc:
        raise RunFolderError(f"{path}: not readable as {what} ({exc})") from exc
    if not isinstance(data, dict):
        raise RunFolderError(f"{path}: expected a {what} mapping at the top level")
    return data


def _read_json(path: Path) -> dict | None:
    return _read_mapping(path, lambda fh: loads(fh.read()), (json.JSONDecodeError,), "JSON")


def _read_jsonl(path: Path) -> list[dict]:
    """Records of a metrics.jsonl; a last line that does not parse (cut off mid-write) is skipped."""
    if not path.is_file():
        return []
    with open(path, encoding="utf-8", errors="replace") as fh:
        lines = [(i + 1, line.strip()) for i, line in enumerate(fh)]
    lines = [(n, line) for n, line in lines if line]
    records = []
    for idx, (lineno, line) in enumerate(lines):
        try:
            record = loads(line)
        except json.JSONDecodeError as exc:
            if idx == len(lines) - 1:
                break  # the run is still writing this line
            raise RunFolderError(f"{path}:{lineno}: not a JSON record ({exc})") from exc
        if isinstance(record, dict):
            records.append(record)
    return records


def load_run(path: str | os.PathLike) -> Run:
    """Read a run folder into a ``Run``; works on finished runs and on runs still in progress."""
    root = Path(path)
    if not root.is_dir():
        raise RunFolderError(f"run folder {str(root)!r} does not exist or is not a directory")
    config = _read_mapping(root / "config.yaml", safe_load, (yaml.YAMLError,), "YAML")
    if config is None:
        raise RunFolderError(f"{str(root)!r} is not a run folder: it has no config.yaml")
    records = _read_jsonl(root / "metrics.jsonl")
    summary = _read_json(root / "summary.json")
    failure = str(summary.get("reason", "")) if is_failed(summary) else None
    return Run(path=root, config=config, manifest=_read_json(root / "manifest.json"),
               rounds=[r for r in records if r["type"] == "round"],
               evals=[r for r in records if r["type"] == "eval"],
               summary=None if failure is not None else summary, failure=failure)  # type: ignore[arg-type]
