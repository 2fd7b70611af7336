"""The run folder: config.yaml, manifest.json, metrics.jsonl (incremental), summary.json, plots/."""
from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from p2pfl.config import ConfigError, RunConfig, log_names, to_yaml
from p2pfl.records import FAILED, EvalRecord, FailedSummary, RoundStart, Summary
from p2pfl.runtime.files import JsonLines, dumps, loads, write_atomic, write_json
from p2pfl.runtime.loggers import Loggers
from p2pfl.runtime.runlock import RunLock

#: An entry whose compact JSON is longer than this many characters is written compact, on one line (a 10,000-peer
#: topology record: 4 MB in 0.4 s, where indenting takes Python's slower encoder 1.5 s and 10 MB).
COMPACT_OVER = 1 << 16


def encode_entry(key: str, value: Any) -> str:
    """One top-level entry as manifest.json writes it, `"key": value`: the value indented as write_json would,
    or compact when it is longer than COMPACT_OVER."""
    text = dumps(value)
    if len(text) <= COMPACT_OVER:
        text = dumps(value, indent=2).replace("\n", "\n  ")
    return f"  {json.dumps(key)}: {text}"


def join_entries(entries: Iterable[str]) -> str:
    """The manifest object from its encoded entries: the text write_json gives for the whole dict."""
    body = ",\n".join(entries)
    return "{\n" + body + "\n}\n" if body else "{}\n"


def make_run_dir(cfg: RunConfig) -> Path:
    """Create `<out>/<time>-<algorithm>-<topology>` (or `<out>/<name>`), never reusing an existing folder."""
    base = Path(cfg.out)
    stem = cfg.name or f"{time.strftime('%Y%m%d-%H%M%S')}-{cfg.algorithm}-{cfg.topology}"
    path = base / stem
    suffix = 1
    try:
        while path.exists():
            suffix += 1
            path = base / f"{stem}-{suffix}"
        path.mkdir(parents=True)
    except OSError as exc:  # --out is a file, read-only, full, or the name too long
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"--out: cannot create the run folder {path} ({reason})") from None
    return path


class RunFolder:
    """Rank 0's writer of the run folder; every file but metrics.jsonl is replaced atomically. Every record
    written to metrics.jsonl goes to the --log trackers too (p2pfl.runtime.loggers).

    A new run's folder is written at once; a resumed run's (`resume_round`: the checkpoint's round) not until
    `start`, called once every check of the resume has passed, so a refused resume leaves the folder as it was.
    The folder's lock (p2pfl.runtime.runlock), taken before the first write, is released by `close`."""

    def __init__(self, path: Path, cfg: RunConfig, resume_round: int | None = None,
                 lock: RunLock | None = None) -> None:
        self.path = Path(path)
        self.cfg = cfg
        self.resume_round = resume_round
        self.manifest: dict[str, Any] = {}
        self._encoded: dict[str, str] = {}  # key -> its `"key": value` text in manifest.json
        self._lock = lock
        self.metrics: JsonLines | None = None
        self.loggers: Loggers | None = None
        if resume_round is None:
            self.start()

    @property
    def started(self) -> bool:
        """Whether `start` has written the folder."""
        return self.metrics is not None

    def start(self) -> None:
        """The folder's first writes: config.yaml, the manifest so far, metrics.jsonl cut back to the checkpoint of
        a resumed run; then the records and trackers open."""
        write_atomic(self.path / "config.yaml", to_yaml(self.cfg))
        self._write_manifest()
        if self.resume_round is not None:
            self._truncate_metrics(self.resume_round)
        self.metrics = JsonLines(self.path / "metrics.jsonl")
        self.loggers = Loggers(log_names(self.cfg.log), self.path, self.cfg.to_dict(),
                               first_step=0 if self.resume_round is None else self.resume_round + 1)

    def _truncate_metrics(self, last_round: int) -> None:
        """Keep the records of rounds up to the checkpoint, so a resumed run appends where it left off."""
        path = self.path / "metrics.jsonl"
        if not path.exists():
            return
        kept = []
        for line in path.read_text().splitlines():
            try:
                record = loads(line)
            except json.JSONDecodeError:
                continue
            if record["round"] <= last_round:
                kept.append(line + "\n")
        write_atomic(path, "".join(kept))

    def update_manifest(self, **entries: Any) -> None:
        """Add or replace top-level manifest entries and (once started) rewrite manifest.json atomically; only the
        given entries are JSON-encoded, the others reuse their cached encoding (a K-peer topology record is
        encoded once)."""
        self.manifest.update(entries)
        for key, value in entries.items():
            self._encoded[key] = encode_entry(key, value)
        if self.started:
            self._write_manifest()

    def _write_manifest(self) -> None:
        write_atomic(self.path / "manifest.json", join_entries(self._encoded[key] for key in self.manifest))

    def log(self, record: RoundStart | EvalRecord) -> None:
        """Append a record to metrics.jsonl and the trackers."""
        assert self.metrics is not None and self.loggers is not None, "the run folder is not started"
        self.metrics.write(record)
        self.loggers.record(record)

    def sync(self) -> None:
        """metrics.jsonl on the disk, as a checkpoint is about to name its round (the other files are written
        atomically, each synced)."""
        if self.metrics is not None:
            self.metrics.sync()

    def log_plots(self) -> None:
        """Hand plots/*.png, as plot_run drew them at the end, to the trackers."""
        if self.loggers is not None:
            self.loggers.images(sorted((self.path / "plots").glob("*.png")))

    def write_summary(self, summary: Summary | FailedSummary) -> None:
        """summary.json, replaced atomically, once every record is on the disk (a folder with a summary reads as
        ended: its records must not be lost after it)."""
        self.sync()
        write_json(self.path / "summary.json", summary)

    def fail(self, reason: str) -> None:
        """Record a run that ended on an error: summary.json with status failed and the reason's first line
        (nothing when the folder was never started: a refused resume leaves it as it was)."""
        if not self.started:
            return
        lines = reason.strip().splitlines()
        self.write_summary(FailedSummary(status=FAILED, reason=lines[0] if lines else "unknown error",
                                         algorithm=self.cfg.algorithm, topology=self.cfg.topology,
                                         peers=self.cfg.peers, run_dir=str(self.path)))

    def close(self) -> None:
        """Close the records and trackers and release the folder's lock (again: nothing)."""
        try:
            if self.metrics is not None:
                self.metrics.close()  # its sync may fail (a full or lost filesystem): the rest is closed still
        finally:
            if self.loggers is not None:
                self.loggers.close()
                self.loggers = None
            if self._lock is not None:
                self._lock.release()
