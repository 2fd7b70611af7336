"""How a metric changes along one axis of a study, against a reference label, paired by seed.

    python -m analysis.shift STUDY_DIR [--axis data] [--reference iid] [--metric probe_acc_avg ...]
        [--contrast dec-ssl,dec-sl ...] [--out F.md]

The question of Dec-SSL's claim ("the probe drops less as the data turn non-IID"): for every combination of the
other axes (method, topology), the metric's mean and interval over seeds at each label of `--axis`, and the drop
from the reference label to each other label. A drop is taken seed by seed (reference run minus the run of the
same seed at that label, seeds where both finished), so that what a seed shares across labels (its
initialisation, its graph) cancels; its mean and interval are over those paired differences. Intervals as
analysis.intervals gives them: the 95% Student-t interval from 3 seeds (a level's cut to the metric's range), the
min–max of 2 (no confidence interval below 3 seeds), none for 1. A CSV twin of the table is written next to the
markdown.

`--contrast A,B` answers the claim directly: B's drop minus A's drop, seed by seed (seeds where all four runs
finished), so a positive value whose interval excludes 0 says that A drops less than B. A and B name rows by
their labels on the other axes, joined by "/" in axis order (`dec-ssl/cycle` when the axes are algorithm and
topology).
"""
from __future__ import annotations

import argparse
import csv
import io
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.frames import axis_column, study_runs
from analysis.intervals import MIN_CI_SEEDS, Estimate, csv_cells, estimate
from analysis.labels import metric_range
from analysis.study import DONE, SEED_AXIS, Study, load_study


@dataclass
class ShiftRow:
    """One combination of the other axes: the metric per label and the paired drops from the reference."""

    axes: dict[str, str]
    levels: dict[str, Estimate | None]
    drops: dict[str, Estimate | None]
    pairs: dict[str, int]


@dataclass(frozen=True)
class Paired:
    """A study's finished runs along `axis`: its labels (plan order), the other non-seed axes, the rows (their
    labels, plan order) and `values`, one line per finished run with a finite value of the metric: `row` (index
    into rows), `label`, `pair` (its seed, as text; its run without a seed axis) and `value`, in plan order."""

    labels: list[str]
    others: list[str]
    rows: list[tuple[str, ...]]
    values: pd.DataFrame

    def drops(self, reference: str) -> pd.DataFrame:
        """row, label, pair, drop: the reference run minus the run of the same row and pair at each other label,
        ordered by pair."""
        ref = self.values[self.values["label"] == reference][["row", "pair", "value"]]
        moved = self.values[self.values["label"] != reference]
        merged = moved.merge(ref, on=["row", "pair"], suffixes=("", "_ref"))
        merged = merged.assign(drop=merged["value_ref"] - merged["value"])
        return merged.sort_values("pair", kind="stable")[["row", "label", "pair", "drop"]]


def paired(study: Study, metric: str, axis: str, reference: str) -> Paired:
    """The finished runs' `metric` along `axis` (analysis.frame's runs of the study); ValueError for an axis or
    reference label the study does not have."""
    if axis not in study.axes:
        raise ValueError(f"the study has no axis {axis!r} (axes: {', '.join(study.axes)})")
    runs = study_runs(study)

    def labels_on(name: str) -> pd.Series:
        column = axis_column(name)
        return runs[column].fillna("").astype(str) if column in runs else pd.Series("", index=runs.index)

    label = labels_on(axis)
    labels = list(dict.fromkeys(label))
    if reference not in labels:
        raise ValueError(f"axis {axis!r} has no label {reference!r} (labels: {', '.join(labels)})")
    others = [a for a in study.axes if a not in (axis, SEED_AXIS)]
    keys = list(zip(*(labels_on(a) for a in others))) if others else [()] * len(runs)
    rows = list(dict.fromkeys(keys))
    value = pd.to_numeric(runs[metric], errors="coerce") if metric in runs else pd.Series(np.nan, index=runs.index)
    pair = runs["seed"].astype(str).where(runs["seed"].notna(), runs["run"]) if SEED_AXIS in study.axes \
        else runs["run"]
    values = pd.DataFrame({"row": [rows.index(k) for k in keys], "label": label, "pair": pair, "value": value})
    finished = (runs["state"] == DONE) & np.isfinite(value.astype(float))
    return Paired(labels, others, rows, values[finished.to_numpy()])


def _lists(table: pd.DataFrame, column: str) -> dict[tuple[int, str], list[float]]:
    """(row, label) -> the column's values, in the table's order."""
    return {key: list(group) for key, group in table.groupby(["row", "label"], sort=False)[column]}


def contrast(study: Study, metric: str, axis: str, reference: str, a: str, b: str
             ) -> dict[str, tuple[Estimate | None, int]]:
    """Per non-reference label: (B's drop minus A's drop, paired by seed; the number of seeds paired)."""
    data = paired(study, metric, axis, reference)
    names = ["/".join(key) for key in data.rows]
    for name in (a, b):
        if name not in names:
            raise ValueError(f"--contrast: no row {name!r} (rows: {', '.join(names)})")
    drops = data.drops(reference)
    side = {name: drops[drops["row"] == names.index(name)] for name in (a, b)}
    both = side[b].merge(side[a], on=["label", "pair"], suffixes=("_b", "_a")).sort_values("pair", kind="stable")
    out = {}
    for label in data.labels:
        if label == reference:
            continue
        at = both[both["label"] == label]
        out[label] = (estimate(list(at["drop_b"] - at["drop_a"])), len(at))
    return out


def contrast_table(study: Study, metric: str, axis: str, reference: str, pairs: list[tuple[str, str]]) -> str:
    """Markdown of `contrast` for each (A, B)."""
    labels = [label for label in paired(study, metric, axis, reference).labels if label != reference]
    lines = ["| B's drop − A's drop | " + " | ".join(f"to {label}" for label in labels) + " |",
             "|" + "---|" * (len(labels) + 1)]
    for a, b in pairs:
        result = contrast(study, metric, axis, reference, a, b)
        lines.append(f"| A {a}, B {b} | " + " | ".join(_fmt(result[label][0])
                                                       for label in labels) + " |")
    return ("\n".join(lines) + "\n\nPaired by seed; positive: A drops less than B (a confidence interval, from "
            f"{MIN_CI_SEEDS} seeds, that excludes 0 resolves it; a min–max of 2 seeds resolves nothing).\n")


def shifts(study: Study, metric: str, axis: str, reference: str) -> tuple[list[str], list[ShiftRow]]:
    """(labels of `axis` in plan order, one row per combination of the other non-seed axes)."""
    data = paired(study, metric, axis, reference)
    levels, drops = _lists(data.values, "value"), _lists(data.drops(reference), "drop")
    moved = [label for label in data.labels if label != reference]
    rows = []
    for r, key in enumerate(data.rows):
        rows.append(ShiftRow(dict(zip(data.others, key)),
                             {label: estimate(levels.get((r, label), []), bounds=metric_range(metric))
                              for label in data.labels},
                             {label: estimate(drops.get((r, label), [])) for label in moved},
                             {label: len(drops.get((r, label), [])) for label in moved}))
    return data.labels, rows


def _fmt(est: Estimate | None, digits: int = 3) -> str:
    """``0.870 [0.860, 0.880] (min–max, n=2)``."""
    if est is None:
        return "—"
    if est.low is None or est.high is None:
        return f"{est.value:.{digits}f} (n={est.n})"
    return f"{est.value:.{digits}f} [{est.low:.{digits}f}, {est.high:.{digits}f}] ({est.kind}, n={est.n})"


def shift_table(study: Study, metric: str, axis: str, reference: str) -> tuple[str, str]:
    """(markdown, csv) of `shifts`."""
    labels, rows = shifts(study, metric, axis, reference)
    others = [a for a in study.axes if a not in (axis, SEED_AXIS)]
    moved = [label for label in labels if label != reference]
    header = [*others, *(f"{metric} {label}" for label in labels), *(f"drop {reference}→{label}" for label in moved)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    buf = io.StringIO()
    writer = csv.writer(buf)
    columns = ("mean", "low", "high", "n", "interval")
    writer.writerow([*others, *(f"{label}_{c}" for label in labels for c in columns),
                     *(f"drop_{label}_{c}" for label in moved for c in columns),
                     *(f"drop_{label}_pairs" for label in moved)])
    for row in rows:
        cells = [row.axes[a] for a in others] + [_fmt(row.levels[label]) for label in labels]
        cells += [_fmt(row.drops[label]) for label in moved]
        lines.append("| " + " | ".join(cells) + " |")
        writer.writerow([row.axes[a] for a in others] + [c for label in labels for c in csv_cells(row.levels[label])]
                        + [c for label in moved for c in csv_cells(row.drops[label])]
                        + [row.pairs[label] for label in moved])
    note = (f"\nMean [interval] over seeds (the 95% Student-t interval from {MIN_CI_SEEDS} seeds, a level's cut to "
            f"the metric's range; the min–max of 2 seeds, no confidence interval; none for 1); a drop is the "
            f"{reference} run minus the run of the same seed at that label (positive: the metric fell).\n")
    return "\n".join(lines) + "\n" + note, buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m analysis.shift",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("study", help="a study folder (with plan.json)")
    parser.add_argument("--axis", default="data")
    parser.add_argument("--reference", default="iid")
    parser.add_argument("--metric", action="append", help="final metric (repeatable; default probe_acc_avg)")
    parser.add_argument("--contrast", action="append", default=[], metavar="A,B",
                        help="B's drop minus A's, paired by seed (repeatable; rows named by their other-axis labels "
                             "joined by /)")
    parser.add_argument("--out", default=None, help="markdown file (default: print); a .csv twin per metric")
    args = parser.parse_args(argv)
    try:
        pairs = []
        for item in args.contrast:
            names = item.split(",")
            if len(names) != 2 or not all(names):
                raise ValueError(f"--contrast: give two rows as A,B, got {item!r}")
            pairs.append((names[0], names[1]))
        study = load_study(args.study)
        parts = []
        for metric in args.metric or ["probe_acc_avg"]:
            md, table = shift_table(study, metric, args.axis, args.reference)
            parts.append(f"### {metric}\n\n{md}")
            if pairs:
                table_md = contrast_table(study, metric, args.axis, args.reference, pairs)
                parts.append(f"#### {metric}: contrasts\n\n{table_md}")
            if args.out:
                Path(args.out).with_name(f"{Path(args.out).stem}-{metric}.csv").write_text(table)
    except ValueError as exc:
        print(f"analysis.shift: {exc}", file=sys.stderr)
        return 2
    text = "\n".join(parts)
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
