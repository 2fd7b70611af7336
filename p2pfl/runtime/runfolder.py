"""The run folder: config.yaml, manifest.json, metrics.jsonl (incremental), summary.json, plots/."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from p2pfl.config import RunConfig, to_yaml
from p2pfl.records import EvalRecord, RoundStart, Summary
from p2pfl.runtime.files import JsonLines, write_atomic, write_json


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
    """Rank 0's writer of the run folder; every file but metrics.jsonl is replaced atomically."""

    def __init__(self, path: Path, cfg: RunConfig, resume_round: int | None = None) -> None:
        self.path = Path(path)
        write_atomic(self.path / "config.yaml", to_yaml(cfg))
        self.manifest: dict[str, Any] = {}
        if resume_round is not None:
            self._truncate_metrics(resume_round)
        self.metrics = JsonLines(self.path / "metrics.jsonl")

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
        self.manifest.update(entries)
        write_json(self.path / "manifest.json", self.manifest)

    def log(self, record: RoundStart | EvalRecord) -> None:
        self.metrics.write(record)

    def write_summary(self, summary: Summary) -> None:
        write_json(self.path / "summary.json", summary)

    def close(self) -> None:
        self.metrics.close()
