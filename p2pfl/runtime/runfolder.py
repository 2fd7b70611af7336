"""The run folder: config.yaml, manifest.json, metrics.jsonl (incremental), summary.json, plots/."""
from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from p2pfl.config import RunConfig, log_names, to_yaml
from p2pfl.records import EvalRecord, RoundStart, Summary
from p2pfl.runtime.files import JsonLines, jsonable, write_atomic, write_json
from p2pfl.runtime.loggers import Loggers

#: An entry whose compact JSON is longer than this many characters is written compact, on one line (a 10,000-peer
#: topology record: 4 MB in 0.4 s, where indenting takes Python's slower encoder 1.5 s and 10 MB).
COMPACT_OVER = 1 << 16


def encode_entry(key: str, value: Any) -> str:
    """One top-level entry as manifest.json writes it, `"key": value`: the value indented as write_json would,
    or compact when it is longer than COMPACT_OVER."""
    text = json.dumps(value, default=jsonable)
    if len(text) <= COMPACT_OVER:
        text = json.dumps(value, indent=2, default=jsonable).replace("\n", "\n  ")
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
    while path.exists():
        suffix += 1
        path = base / f"{stem}-{suffix}"
    path.mkdir(parents=True)
    return path


class RunFolder:
    """Rank 0's writer of the run folder; every file but metrics.jsonl is replaced atomically. Every record
    written to metrics.jsonl goes to the --log trackers too (p2pfl.runtime.loggers)."""

    def __init__(self, path: Path, cfg: RunConfig, resume_round: int | None = None) -> None:
        self.path = Path(path)
        write_atomic(self.path / "config.yaml", to_yaml(cfg))
        self.manifest: dict[str, Any] = {}
        self._encoded: dict[str, str] = {}  # key -> its `"key": value` text in manifest.json
        if resume_round is not None:
            self._truncate_metrics(resume_round)
        self.metrics = JsonLines(self.path / "metrics.jsonl")
        self.loggers = Loggers(log_names(cfg.log), self.path, cfg.to_dict(),
                               first_step=0 if resume_round is None else resume_round + 1)

    def _truncate_metrics(self, last_round: int) -> None:
        """Keep the records of rounds up to the checkpoint, so a resumed run appends where it left off."""
        path = self.path / "metrics.jsonl"
        if not path.exists():
            return
        kept = []
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record["round"] <= last_round:
                kept.append(line + "\n")
        write_atomic(path, "".join(kept))

    def update_manifest(self, **entries: Any) -> None:
        """Add or replace top-level manifest entries and rewrite manifest.json atomically; only the given entries
        are JSON-encoded, the others reuse their cached encoding (a K-peer topology record is encoded once)."""
        self.manifest.update(entries)
        for key, value in entries.items():
            self._encoded[key] = encode_entry(key, value)
        write_atomic(self.path / "manifest.json", join_entries(self._encoded[key] for key in self.manifest))

    def log(self, record: RoundStart | EvalRecord) -> None:
        self.metrics.write(record)
        self.loggers.record(record)

    def log_plots(self) -> None:
        """Hand plots/*.png, as plot_run drew them at the end, to the trackers."""
        self.loggers.images(sorted((self.path / "plots").glob("*.png")))

    def write_summary(self, summary: Summary) -> None:
        write_json(self.path / "summary.json", summary)

    def close(self) -> None:
        self.metrics.close()
        self.loggers.close()
