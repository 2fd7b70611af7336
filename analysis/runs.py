"""Reading run folders (``runs/<time>-<algorithm>-<topology>/``, see docs/CONVENTIONS.md).

A run folder holds ``config.yaml`` and ``manifest.json`` (written at start), ``metrics.jsonl`` (one JSON
record per line, appended as rounds finish) and ``summary.json`` (written at the end). ``load_run`` reads
whatever is there, so it also works on a run that is still in progress: no summary yet, and a last
``metrics.jsonl`` line that may be cut off mid-write (it is skipped).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

__all__ = ["Run", "RunFolderError", "load_run", "is_number"]


class RunFolderError(ValueError):
    """A path given as a run folder is not one, or one of its files cannot be read."""


def is_number(value: Any) -> bool:
    """True for a real, finite-or-not int/float that is not a bool (what can be plotted or tabulated)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _first(mapping: Mapping[str, Any] | None, *keys: str) -> Any:
    """The value of the first of ``keys`` present (and not None) in ``mapping``, else None."""
    if not isinstance(mapping, Mapping):
        return None
    for key in keys:
        value = mapping.get(key)
        if value is not None:
            return value
    return None


def _name_of(value: Any) -> str | None:
    """A config entry given either as a plain name or as a section with a ``name``/``kind``/``type`` key."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        inner = _first(value, "name", "kind", "type", "method")
        return None if inner is None else str(inner)
    return str(value)


@dataclass
class Run:
    """One run folder, as read from disk.

    ``rounds`` and ``evals`` are the ``metrics.jsonl`` records of type ``round`` and ``eval``, in file order;
    ``summary`` is None while the run is still in progress.
    """

    path: Path
    config: dict = field(default_factory=dict)
    manifest: dict = field(default_factory=dict)
    rounds: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    summary: dict | None = None

    # ----- identity -------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The folder name, which is how runs are told apart in reports."""
        return self.path.name

    @property
    def algorithm(self) -> str | None:
        """The algorithm name from the config (``algorithm: gossip`` or ``algorithm: {name: gossip}``)."""
        value = _name_of(_first(self.config, "algorithm", "method"))
        if value is None:
            value = _name_of(_first(self.manifest, "algorithm", "method"))
        return value

    @property
    def topology_name(self) -> str | None:
        """The topology name from the config, or from the manifest's topology section."""
        value = _name_of(self.config.get("topology"))
        if value is None:
            value = _name_of(self.manifest.get("topology"))
        return value

    @property
    def num_peers(self) -> int | None:
        """K: from the config, else the size of the recorded mixing matrix or peer specification."""
        value = _first(self.config, "peers", "num_peers", "K", "n_peers")
        if isinstance(value, Mapping):
            value = _first(value, "count", "num", "n", "K")
        if isinstance(value, list):  # a list of per-peer specifications
            return len(value)
        if is_number(value):
            return int(value)
        topo = self.manifest.get("topology")
        if isinstance(topo, Mapping):
            mixing = topo.get("mixing")
            if isinstance(mixing, list) and mixing:
                return len(mixing)
            stats = topo.get("stats")
            n = _first(stats, "num_peers", "nodes", "K", "n")
            if is_number(n):
                return int(n)
        spec = self.peers_spec
        if spec:
            return len(spec)
        counts = self.class_counts
        if counts:
            return len(counts)
        return None

    @property
    def partition_label(self) -> str | None:
        """``dirichlet(alpha=0.5)``-style description of the data partition, from the config."""
        part = _first(self.config, "partition", "split")
        if part is None:
            data = self.config.get("data")
            if isinstance(data, Mapping):
                part = _first(data, "partition", "split")
        if part is None:
            return None
        if not isinstance(part, Mapping):
            return str(part)
        name = _name_of(part) or "?"
        params = [f"{k}={part[k]}" for k in ("alpha", "beta", "groups", "min_size") if k in part]
        return f"{name}({', '.join(params)})" if params else name

    @property
    def planned_rounds(self) -> int | None:
        """The number of rounds the config asks for."""
        value = _first(self.config, "rounds", "num_rounds", "T")
        if isinstance(value, Mapping):
            value = _first(value, "count", "num", "T")
        return int(value) if is_number(value) else None

    @property
    def rounds_done(self) -> int:
        """The highest round number recorded so far (0 when none is)."""
        done = [r.get("round") for r in self.rounds if is_number(r.get("round"))]
        return int(max(done)) if done else 0

    # ----- recorded data -----------------------------------------------------------------------------------
    @property
    def peers_spec(self) -> list[dict] | None:
        """manifest["peers_spec"]: one {"peer", "model", "task", ...} per peer (FedMuscle), sorted by peer."""
        spec = self.manifest.get("peers_spec")
        if not isinstance(spec, list):
            return None
        items = [dict(s) for s in spec if isinstance(s, Mapping)]
        for i, item in enumerate(items):
            item.setdefault("peer", i)

        def order(item: dict) -> tuple[int, str]:
            try:
                return (int(item["peer"]), "")
            except (TypeError, ValueError):
                return (1 << 30, str(item["peer"]))

        return sorted(items, key=order)

    @property
    def class_counts(self) -> list[list[float]] | None:
        """manifest["partition"]["class_counts"] (peers x classes), when the data is partitioned."""
        part = self.manifest.get("partition")
        counts = part.get("class_counts") if isinstance(part, Mapping) else None
        return counts if isinstance(counts, list) and counts else None

    @property
    def topology(self) -> dict:
        """manifest["topology"] (``edges``, ``mixing``, ``stats``), or {} when absent."""
        topo = self.manifest.get("topology")
        return dict(topo) if isinstance(topo, Mapping) else {}

    def final_eval(self) -> dict | None:
        """The last eval record (the most recent evaluation), or None."""
        return self.evals[-1] if self.evals else None

    def final_per_peer(self) -> dict[str, dict] | None:
        """The per-peer metrics of the last eval record that has them, keyed by peer id as a string."""
        for record in reversed(self.evals):
            per_peer = record.get("per_peer")
            if isinstance(per_peer, Mapping) and per_peer:
                return {str(k): dict(v) for k, v in per_peer.items() if isinstance(v, Mapping)}
        return None

    def final_metrics(self) -> dict[str, float]:
        """The numeric metrics of the last eval record."""
        record = self.final_eval()
        metrics = record.get("metrics") if record else None
        if not isinstance(metrics, Mapping):
            return {}
        return {str(k): float(v) for k, v in metrics.items() if is_number(v)}

    def bytes_sent_per_peer_round(self) -> float | None:
        """Mean bytes one peer sends in one round.

        A round record's ``bytes_sent`` is read as the total over the peers active in that round (its
        ``active`` list; all K peers when the list is absent), so it is divided by that count and averaged
        over the recorded rounds.
        """
        per_round = []
        k = self.num_peers
        for record in self.rounds:
            sent = record.get("bytes_sent")
            if not is_number(sent):
                continue
            active = record.get("active")
            n = len(active) if isinstance(active, list) and active else k
            if not n:
                continue
            per_round.append(float(sent) / n)
        return sum(per_round) / len(per_round) if per_round else None

    def wall_time_s(self) -> float | None:
        """Wall time of the run: the summary's, else the ``elapsed_s`` (time since start) of the last round."""
        value = _first(self.summary, "wall_time_s", "wall_s", "elapsed_s", "total_time_s", "time_s")
        if is_number(value):
            return float(value)
        for record in reversed(self.rounds):
            if is_number(record.get("elapsed_s")):
                return float(record["elapsed_s"])
        return None

    def series(self, key: str, source: str = "rounds") -> tuple[list[float], list[float]]:
        """(rounds, values) of a numeric field of the round records, or of an eval metric (source="evals")."""
        xs: list[float] = []
        ys: list[float] = []
        for record in self.rounds if source == "rounds" else self.evals:
            value = record.get(key) if source == "rounds" else (record.get("metrics") or {}).get(key)
            t = record.get("round")
            if is_number(value) and is_number(t) and not math.isnan(float(value)):
                xs.append(float(t))
                ys.append(float(value))
        return xs, ys


def _read_json(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        raise RunFolderError(f"{path}: not readable as JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise RunFolderError(f"{path}: expected a JSON object at the top level")
    return data


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
            record = json.loads(line)
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
    files = [root / n for n in ("config.yaml", "manifest.json", "metrics.jsonl", "summary.json")]
    if not any(f.is_file() for f in files):
        raise RunFolderError(
            f"{str(root)!r} is not a run folder: none of config.yaml, manifest.json, metrics.jsonl found")

    config: dict = {}
    cfg_path = root / "config.yaml"
    if cfg_path.is_file():
        try:
            with open(cfg_path, encoding="utf-8") as fh:
                loaded = yaml.safe_load(fh)
        except (OSError, yaml.YAMLError) as exc:
            raise RunFolderError(f"{cfg_path}: not readable as YAML ({exc})") from exc
        if isinstance(loaded, dict):
            config = loaded

    manifest = _read_json(root / "manifest.json") or {}
    summary = _read_json(root / "summary.json")
    records = _read_jsonl(root / "metrics.jsonl")
    rounds = [r for r in records if r.get("type") == "round"]
    evals = [r for r in records if r.get("type") == "eval"]
    return Run(path=root, config=config, manifest=manifest, rounds=rounds, evals=evals, summary=summary)
