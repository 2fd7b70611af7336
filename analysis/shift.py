"""How a metric changes along one axis of a study, against a reference label, paired by seed.

    python -m analysis.shift STUDY_DIR [--axis data] [--reference iid] [--metric probe_acc_avg ...]
        [--contrast dec-ssl,dec-sl ...] [--out F.md]

The question of Dec-SSL's claim ("the probe drops less as the data turn non-IID"): for every combination of the
other axes (method, topology), the metric's mean and 95% CI over seeds at each label of `--axis`, and the drop
from the reference label to each other label. A drop is taken seed by seed (reference run minus the run of the
same seed at that label, seeds where both finished), so that what a seed shares across labels (its
initialisation, its graph) cancels; its mean and 95% CI are over those paired differences. A CSV twin of the
table is written next to the markdown.

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

from analysis.study import SEED_AXIS, Interval, Point, Study, load_study, mean_ci


@dataclass
class ShiftRow:
    """One combination of the other axes: the metric per label and the paired drops from the reference."""

    axes: dict[str, str]
    levels: dict[str, Interval | None]
    drops: dict[str, Interval | None]
    pairs: dict[str, int]


def _value(point: Point, metric: str) -> float | None:
    return point.final_metrics().get(metric)


Cells = dict[tuple[str, ...], dict[str, dict[str, float]]]


def _cells(study: Study, metric: str, axis: str, reference: str) -> tuple[list[str], list[str], Cells]:
    """(labels of `axis`, the other non-seed axes, {row key: {label: {seed: value}}}) of the finished runs."""
    if axis not in study.axes:
        raise ValueError(f"the study has no axis {axis!r} (axes: {', '.join(study.axes)})")
    labels = list(dict.fromkeys(p.axes.get(axis, "") for p in study.points))
    if reference not in labels:
        raise ValueError(f"axis {axis!r} has no label {reference!r} (labels: {', '.join(labels)})")
    others = [a for a in study.axes if a not in (axis, SEED_AXIS)]
    cells: Cells = {}
    for point in study.points:
        key = tuple(point.axes.get(a, "") for a in others)
        by_label = cells.setdefault(key, {})
        value = _value(point, metric)
        if value is not None:
            by_label.setdefault(point.axes.get(axis, ""), {})[point.axes.get(SEED_AXIS, point.name)] = value
    return labels, others, cells


def contrast(study: Study, metric: str, axis: str, reference: str, a: str, b: str
             ) -> dict[str, tuple[Interval | None, int]]:
    """Per non-reference label: (B's drop minus A's drop, paired by seed; the number of seeds paired)."""
    labels, _, cells = _cells(study, metric, axis, reference)
    rows = {"/".join(key): by_label for key, by_label in cells.items()}
    for name in (a, b):
        if name not in rows:
            raise ValueError(f"--contrast: no row {name!r} (rows: {', '.join(rows)})")
    out = {}
    for label in labels:
        if label == reference:
            continue
        sides = [rows[name].get(lab, {}) for name in (a, b) for lab in (reference, label)]
        seeds = sorted(set.intersection(*(set(side) for side in sides)))
        a_ref, a_lab, b_ref, b_lab = sides
        out[label] = (mean_ci([(b_ref[s] - b_lab[s]) - (a_ref[s] - a_lab[s]) for s in seeds]), len(seeds))
    return out


def contrast_table(study: Study, metric: str, axis: str, reference: str, pairs: list[tuple[str, str]]) -> str:
    """Markdown of `contrast` for each (A, B)."""
    labels = [label for label in _cells(study, metric, axis, reference)[0] if label != reference]
    lines = ["| B's drop − A's drop | " + " | ".join(f"to {label}" for label in labels) + " |",
             "|" + "---|" * (len(labels) + 1)]
    for a, b in pairs:
        result = contrast(study, metric, axis, reference, a, b)
        lines.append(f"| A {a}, B {b} | " + " | ".join(f"{_fmt(result[label][0])} ({result[label][1]} seeds)"
                                                       for label in labels) + " |")
    return ("\n".join(lines) + "\n\nPaired by seed; positive: A drops less than B (an interval that excludes 0 "
            "resolves it).\n")


def shifts(study: Study, metric: str, axis: str, reference: str) -> tuple[list[str], list[ShiftRow]]:
    """(labels of `axis` in plan order, one row per combination of the other non-seed axes)."""
    labels, others, cells = _cells(study, metric, axis, reference)
    rows = []
    for key, by_label in cells.items():
        ref = by_label.get(reference, {})
        levels = {label: mean_ci(list(by_label.get(label, {}).values())) for label in labels}
        drops, pairs = {}, {}
        for label in labels:
            if label == reference:
                continue
            seeds = sorted(set(ref) & set(by_label.get(label, {})))
            drops[label] = mean_ci([ref[s] - by_label[label][s] for s in seeds])
            pairs[label] = len(seeds)
        rows.append(ShiftRow(dict(zip(others, key)), levels, drops, pairs))
    return labels, rows


def _fmt(iv: Interval | None, digits: int = 3) -> str:
    if iv is None:
        return "—"
    if iv.n < 2:
        return f"{iv.mean:.{digits}f} (n=1)"
    return f"{iv.mean:.{digits}f} ± {iv.half_width:.{digits}f}"


def shift_table(study: Study, metric: str, axis: str, reference: str) -> tuple[str, str]:
    """(markdown, csv) of `shifts`."""
    labels, rows = shifts(study, metric, axis, reference)
    others = [a for a in study.axes if a not in (axis, SEED_AXIS)]
    moved = [label for label in labels if label != reference]
    header = [*others, *(f"{metric} {label}" for label in labels), *(f"drop {reference}→{label}" for label in moved)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow([*others, *(f"{label}_mean" for label in labels), *(f"{label}_ci" for label in labels),
                     *(f"drop_{label}_mean" for label in moved), *(f"drop_{label}_ci" for label in moved),
                     *(f"drop_{label}_pairs" for label in moved)])
    for row in rows:
        cells = [row.axes[a] for a in others] + [_fmt(row.levels[label]) for label in labels]
        cells += [_fmt(row.drops[label]) for label in moved]
        lines.append("| " + " | ".join(cells) + " |")
        mean = lambda iv: "" if iv is None else f"{iv.mean:.6g}"  # noqa: E731
        half = lambda iv: "" if iv is None or iv.n < 2 else f"{iv.half_width:.6g}"  # noqa: E731
        writer.writerow([row.axes[a] for a in others] + [mean(row.levels[label]) for label in labels]
                        + [half(row.levels[label]) for label in labels] + [mean(row.drops[label]) for label in moved]
                        + [half(row.drops[label]) for label in moved] + [row.pairs[label] for label in moved])
    note = (f"\nMean ± 95% CI half-width over seeds; a drop is the {reference} run minus the run of the same seed "
            f"at that label (positive: the metric fell).\n")
    return "\n".join(lines) + "\n" + note, buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.shift", description=__doc__.split("\n")[0])
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
