"""FedMuscle's claim over a study: each loss's Δ% against local training, paired by seed.

    python -m analysis.muscle STUDY_DIR [--method-axis method] [--local local] [--reference muscle] [--out F.md]

For every finished run of a method other than `--local`, Δ% (SPEC §6) against the local run with the same
labels on the other axes and the same seed: per peer and its mean. The report gives, per method and the other
axes (topology), the mean Δ% with its 95% CI over seeds and the per-peer Δ% (mean over seeds) with their spread
across peers; `--reference`'s Δ minus each other method's, seed by seed (what a seed shares cancels); the
logged cosine between each loss's anchor gradient and pairwise InfoNCE's per round; the M the peers used; and
the bytes per peer and round against the paper's server design. A CSV of the per-run Δ is written beside.
"""
from __future__ import annotations

import argparse
import csv
import io
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from analysis.delta import delta_percent, lower_is_better
from analysis.intervals import MIN_CI_SEEDS, Estimate, estimate
from analysis.report import peer_task_metrics
from analysis.study import DONE, SEED_AXIS, Point, Study, load_study


@dataclass
class PairedDelta:
    """One method run against its local twin: the labels of its other axes, the seed, and the Δ."""

    method: str
    axes: dict[str, str]
    seed: str
    per_peer: dict[str, float]
    mean: float
    point: Point


def paired_deltas(study: Study, method_axis: str = "method", local: str = "local") -> list[PairedDelta]:
    """Δ% of every finished non-local run against the finished local run of the same other labels and seed."""
    if method_axis not in study.axes:
        raise ValueError(f"the study has no axis {method_axis!r} (axes: {', '.join(study.axes)})")
    others = [a for a in study.axes if a not in (method_axis, SEED_AXIS)]
    done = [p for p in study.points if p.state == DONE and p.run is not None]
    twins = {(tuple(p.axes.get(a, "") for a in others), p.axes.get(SEED_AXIS, "")): p
             for p in done if p.axes.get(method_axis) == local}
    out = []
    for p in done:
        if p.axes.get(method_axis) == local:
            continue
        key = (tuple(p.axes.get(a, "") for a in others), p.axes.get(SEED_AXIS, ""))
        twin = twins.get(key)
        if twin is None:
            continue
        mine, base = peer_task_metrics(p.run), peer_task_metrics(twin.run)
        peers = [q for q in mine if q in base]
        if not peers:
            continue
        flags = {q: lower_is_better(mine[q][1]) for q in peers}
        delta = delta_percent({q: mine[q][0] for q in peers}, {q: base[q][0] for q in peers}, flags)
        out.append(PairedDelta(p.axes[method_axis], {a: p.axes.get(a, "") for a in others},
                               p.axes.get(SEED_AXIS, ""), delta.per_peer, delta.mean, p))
    return out


def _fmt(est: Estimate | None, digits: int = 2) -> str:
    """``+2.50 [-5.00, +10.00] (min–max, n=2)``: the mean and the interval analysis.intervals gives its n."""
    if est is None:
        return "–"
    if est.low is None or est.high is None:
        return f"{est.value:+.{digits}f} (n={est.n})"
    return f"{est.value:+.{digits}f} [{est.low:+.{digits}f}, {est.high:+.{digits}f}] ({est.kind}, n={est.n})"


#: What the interval columns hold (the tables' headers point here).
INTERVALS = (f"Intervals over seeds: the 95% Student-t interval from {MIN_CI_SEEDS} seeds, the min–max of 2 seeds "
             "(no confidence interval below 3), none for 1.")


def _table(header: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                     + ["| " + " | ".join(r) + " |" for r in rows])


def _groups(deltas: Sequence[PairedDelta]) -> dict[tuple[str, tuple[str, ...]], list[PairedDelta]]:
    out: dict[tuple[str, tuple[str, ...]], list[PairedDelta]] = {}
    for d in deltas:
        out.setdefault((d.method, tuple(d.axes.values())), []).append(d)
    return out


def delta_section(deltas: Sequence[PairedDelta], others: list[str]) -> str:
    rows = []
    for (method, labels), ds in _groups(deltas).items():
        peers = sorted({q for d in ds for q in d.per_peer}, key=int)
        per_peer = {q: statistics.fmean(d.per_peer[q] for d in ds if q in d.per_peer) for q in peers}
        spread = f"{min(per_peer.values()):+.1f} … {max(per_peer.values()):+.1f}" if per_peer else "–"
        rows.append([method, *labels, _fmt(estimate([d.mean for d in ds])), spread,
                     " ".join(f"{q}:{v:+.1f}" for q, v in per_peer.items())])
    return _table(["method", *others, "mean Δ% [interval over seeds]", "per-peer Δ% range",
                   "per peer (mean over seeds)"], rows)


def reference_section(deltas: Sequence[PairedDelta], others: list[str], reference: str) -> str:
    """`reference`'s Δ minus each other method's, paired by seed."""
    by = {(d.method, tuple(d.axes.values()), d.seed): d.mean for d in deltas}
    rows = []
    for (method, labels), ds in _groups(deltas).items():
        if method == reference:
            continue
        diffs = [by[reference, labels, d.seed] - d.mean for d in ds if (reference, labels, d.seed) in by]
        wins = sum(x > 0 for x in diffs)
        rows.append([f"{reference} − {method}", *labels, _fmt(estimate(diffs)), f"{wins}/{len(diffs)}"])
    return _table(["difference of mean Δ%", *others, "mean [interval over seeds]",
                   f"seeds where {reference} is higher"], rows)


def _rounds_mean(point: Point, key: str) -> list[float | None]:
    out = []
    for record in point.run.rounds:
        values = record.get(key) if isinstance(record, dict) else None
        if record.get("round", 0) >= 1 and isinstance(values, dict):
            xs = [float(v) for v in values.values() if v is not None]
            out.append(statistics.fmean(xs) if xs else None)
    return out


def per_round_section(study: Study, method_axis: str, key: str, others: list[str]) -> str:
    """The mean over seeds and peers of a per-peer round quantity, per method and other labels, round by round."""
    groups: dict[tuple[str, tuple[str, ...]], list[list[float | None]]] = {}
    for p in study.points:
        if p.state != DONE or p.run is None:
            continue
        series = _rounds_mean(p, key)
        if any(v is not None for v in series):
            groups.setdefault((p.axes.get(method_axis, ""), tuple(p.axes.get(a, "") for a in others)),
                              []).append(series)
    if not groups:
        return "(none logged)"
    width = max(len(s) for ss in groups.values() for s in ss)
    rows = []
    for (method, labels), ss in groups.items():
        cells = []
        for r in range(width):
            xs = [s[r] for s in ss if r < len(s) and s[r] is not None]
            cells.append(f"{statistics.fmean(xs):.3f}" if xs else "–")
        rows.append([method, *labels, *cells])
    return _table(["method", *others, *[f"round {r + 1}" for r in range(width)]], rows)


def bytes_section(study: Study, method_axis: str, others: list[str]) -> str:
    rows, seen = [], set()
    for p in study.points:
        comm = ((p.run.summary or {}).get("communication") if p.state == DONE and p.run else None) or {}
        key = (p.axes.get(method_axis, ""), tuple(p.axes.get(a, "") for a in others))
        if not comm or not comm.get("bytes_sent_per_peer_round") or key in seen:  # local training sends nothing
            continue
        seen.add(key)
        rows.append([key[0], *key[1], f"{comm['bytes_sent_per_peer_round'] / 1024:.1f} KiB",
                     f"{comm['server_downlink_bytes_per_peer_round'] / 2**20:.1f} MiB",
                     f"{comm['server_uplink_bytes_per_peer_round'] / 1024:.1f} KiB", str(comm.get("server_M"))])
    return _table(["method", *others, "sent peer to peer", "server design: down", "up", "server M"], rows)


def build_report(study: Study, method_axis: str = "method", local: str = "local", reference: str = "muscle") -> str:
    others = [a for a in study.axes if a not in (method_axis, SEED_AXIS)]
    deltas = paired_deltas(study, method_axis, local)
    counts = study.counts()
    parts = [f"# {study.name}: Δ% against local training", "",
             f"{counts[DONE]} runs finished of {len(study.points)}; {len(deltas)} paired with their local twin.", "",
             delta_section(deltas, others), "", INTERVALS, "",
             f"## {reference} against the other losses, paired by seed", "",
             reference_section(deltas, others, reference), "",
             "## cos(∇ loss, ∇ pairwise InfoNCE) at the anchor, mean over seeds, peers and a round's steps", "",
             per_round_section(study, method_axis, "grad_cos_pairwise", others), "",
             "## M used (mean over seeds and peers)", "", per_round_section(study, method_axis, "muscle_m", others), "",
             "## bytes per peer and round", "", bytes_section(study, method_axis, others), ""]
    return "\n".join(parts)


def deltas_csv(deltas: Sequence[PairedDelta]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    peers = sorted({q for d in deltas for q in d.per_peer}, key=int)
    others = list(deltas[0].axes) if deltas else []
    writer.writerow(["method", *others, "seed", "mean_delta_pct", *[f"delta_pct_peer{q}" for q in peers]])
    for d in deltas:
        writer.writerow([d.method, *d.axes.values(), d.seed, f"{d.mean:.6g}",
                         *[f"{d.per_peer[q]:.6g}" if q in d.per_peer else "" for q in peers]])
    return buf.getvalue()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m analysis.muscle",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("study")
    parser.add_argument("--method-axis", default="method")
    parser.add_argument("--local", default="local", help="the label of the local-training baseline")
    parser.add_argument("--reference", default="muscle", help="the method compared with every other one")
    parser.add_argument("--out", default=None, help="markdown file (default STUDY/muscle.md; CSV beside it)")
    args = parser.parse_args(argv)
    try:
        study = load_study(args.study)
        text = build_report(study, args.method_axis, args.local, args.reference)
        deltas = paired_deltas(study, args.method_axis, args.local)
    except ValueError as exc:
        print(f"analysis.muscle: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path(args.study) / "muscle.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.with_suffix(".csv").write_text(deltas_csv(deltas))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
