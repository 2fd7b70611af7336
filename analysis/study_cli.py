"""The command line and the CSV of the privacy studies' table scripts (analysis.privacy_study,
analysis.reconstruction_study): a study folder in, STEM.csv and STEM.png out."""
from __future__ import annotations

import argparse
import csv
from pathlib import Path
from typing import Any


def arguments(doc: str, argv: list[str] | None) -> argparse.Namespace:
    """`STUDY --out STEM`, described by the first line of the script's `doc`."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("study", type=Path)
    ap.add_argument("--out", type=Path, required=True, help="file stem: STEM.csv and STEM.png are written")
    return ap.parse_args(argv)


def write_csv(table: list[dict[str, Any]], stem: Path) -> Path:
    """The rows (one dict each, the first's keys as the header) as STEM.csv, its folder made; its path."""
    path = stem.with_suffix(".csv")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
    return path
