"""The bytes–accuracy frontier of a study (compressed gossip): what each arm pays in bytes for its final metric.

    python -m analysis.frontier STUDY_DIR [--metric test_acc_avg] [--reference LABEL] [--out DIR]

Arms are the study's groups (analysis.study: every axis except ``seed``). Per arm: the finished seeds n, the
final metric's mean and its interval (analysis.intervals: the 95% Student-t interval cut to the metric's range
from 3 seeds, the min–max at 2, none at 1), the total bytes sent
over the run (the sum of every round record's ``bytes_sent``, all peers) and the bytes one peer sends in one
round (Run.bytes_sent_per_peer_round), both means over the seeds, and the byte ratio reference total / arm total
("how many times fewer bytes"). A run whose round records have a non-finite (or missing-as-null) ``loss_mean``
is marked diverged; it stays in its arm (a finite final metric, such as chance accuracy, counts in the interval; a
non-finite one is left out of it, its bytes kept).

The reference arm is the one whose label is LABEL (default ``dense``): its full label ("codec=dense,
consensus_step=1"), its axis labels joined by "/" ("dense/1"), or its label on one axis ("dense"). When several
arms match, the one with the highest mean metric is the reference (the best-tuned one; the output says which).

Verdict of an arm against the reference (R = [low_r, high_r], the reference's 95% confidence interval; A = [low,
high], the arm's), defined on confidence intervals only, so from 3 seeds on each side (a min–max of 2 values is
no confidence interval, and a verdict on it would read as one):
    within    low_r <= mean <= high_r                      (the arm's mean inside R; the arm may have any n >= 1)
    below     high < low_r                                 (A entirely below R; the arm has n >= 3)
    above     low > high_r                                 (A entirely above R; the arm has n >= 3)
    overlaps  otherwise, the arm with n >= 3               (A and R overlap, the arm's mean outside R)
    –         the reference has fewer than 3 seeds, the arm no metric, or an arm below 3 seeds outside R.

Writes frontier.csv, frontier.md and frontier.png into --out (default STUDY_DIR/frontier).
"""
from __future__ import annotations

import argparse
import csv
import io
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from p2pfl.runtime.files import write_atomic

from .intervals import MIN_CI_SEEDS, MIN_MAX, NO_INTERVAL, Estimate, cell, csv_cells, csv_columns
from .report import _fmt_bytes, _md_table, print_written
from .runs import Run, is_number
from .study import CONFIDENCE, Group, Study, StudyFolderError, _num, headline_metric, load_study

__all__ = ["Arm", "VERDICT_RULE", "THRESHOLDS", "arms", "diverged", "frontier_csv", "frontier_markdown",
           "main", "plot_frontier", "reference_arm", "total_bytes", "verdict", "write_frontier"]

DEFAULT_REFERENCE = "dense"
THRESHOLDS = (10, 100)
WITHIN, BELOW, ABOVE, OVERLAPS, NONE = "within", "below", "above", "overlaps", "–"
VERDICT_RULE = (f"verdict against the reference's 95% confidence interval R: within if the arm's mean lies in R; "
                f"below / above if the arm's own 95% confidence interval lies entirely below / above R; overlaps "
                f"otherwise (the intervals overlap, the mean outside R); – when the reference has fewer than "
                f"{MIN_CI_SEEDS} seeds (no confidence interval: a min–max of 2 is none), or an arm with fewer than "
                f"{MIN_CI_SEEDS} seeds has its mean outside R")


def total_bytes(run: Run) -> float:
    """Bytes sent over the whole run by all peers: the sum of the round records' ``bytes_sent``."""
    return float(sum(r["bytes_sent"] for r in run.rounds if is_number(r.get("bytes_sent"))))


def diverged(run: Run) -> bool:
    """Whether any round record has a non-finite loss_mean (NaN and ±inf are written as null or as numbers)."""
    return any("loss_mean" in r and not (is_number(r["loss_mean"]) and math.isfinite(float(r["loss_mean"])))
               for r in run.rounds)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


@dataclass
class Arm:
    """One group of the study with its frontier numbers (bytes are means over the finished seeds)."""

    group: Group
    interval: Estimate | None
    total_bytes: float | None
    bytes_per_peer_round: float | None
    diverged: int  # finished seeds that diverged

    @property
    def label(self) -> str:
        return self.group.label

    @property
    def short(self) -> str:
        return "/".join(self.group.axes.values()) or "all"

    def matches(self, label: str) -> bool:
        return label in (self.label, self.short, *self.group.axes.values())

    def bounds(self) -> tuple[float, float] | None:
        """The arm's 95% confidence interval; None below MIN_CI_SEEDS seeds (or without a metric)."""
        iv = self.interval
        if iv is None or iv.low is None or iv.high is None or iv.kind in (NO_INTERVAL, MIN_MAX):
            return None
        return iv.low, iv.high


def arms(study: Study, metric: str) -> list[Arm]:
    out = []
    for group in study.groups:
        runs = [p.run for p in group.done if p.run is not None]
        per_round = [b for b in (r.bytes_sent_per_peer_round() for r in runs) if b is not None]
        out.append(Arm(group, group.estimate(metric), _mean([total_bytes(r) for r in runs]), _mean(per_round),
                       sum(diverged(r) for r in runs)))
    return out


def reference_arm(all_arms: Sequence[Arm], label: str) -> tuple[Arm, str]:
    """The reference arm and a line saying how it was chosen; StudyFolderError when no arm matches."""
    found = [a for a in all_arms if a.matches(label)]
    if not found:
        raise StudyFolderError(f"no arm is labelled {label!r}; the arms: " + "; ".join(a.label for a in all_arms))
    if len(found) == 1:
        return found[0], f"reference: {found[0].label}"
    best = max(found, key=lambda a: -math.inf if a.interval is None else a.interval.value)
    return best, (f"reference: {best.label} (the highest mean of the {len(found)} arms matching {label!r}: "
                  + "; ".join(a.label for a in found) + ")")


def verdict(arm: Arm, ref: Arm) -> str:
    """The module docstring's rule."""
    reference = ref.bounds()
    if arm.interval is None or reference is None:
        return NONE
    low_r, high_r = reference
    if low_r <= arm.interval.value <= high_r:
        return WITHIN
    if arm.bounds() is None:
        return NONE
    low, high = arm.bounds()
    if high < low_r:
        return BELOW
    if low > high_r:
        return ABOVE
    return OVERLAPS


def ratio(arm: Arm, ref: Arm) -> float | None:
    """Reference total bytes / the arm's: how many times fewer bytes the arm sends."""
    if arm.total_bytes is None or ref.total_bytes is None or arm.total_bytes <= 0:
        return None
    return ref.total_bytes / arm.total_bytes


def frontier_csv(study: Study, all_arms: Sequence[Arm], ref: Arm, metric: str) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*study.group_axes, "label", "n", "n_expected", "diverged", *csv_columns(metric),
                     "total_bytes_mean", "bytes_per_peer_round_mean", "bytes_ratio_to_reference", "verdict",
                     "reference"])
    for arm in all_arms:
        writer.writerow([*arm.group.axes.values(), arm.label, arm.group.n_done, arm.group.n_expected, arm.diverged,
                         *csv_cells(arm.interval), _num(arm.total_bytes), _num(arm.bytes_per_peer_round),
                         _num(ratio(arm, ref)),
                         verdict(arm, ref), int(arm is ref)])
    return buf.getvalue()


def threshold_lines(all_arms: Sequence[Arm], ref: Arm) -> list[str]:
    lines = []
    for k in THRESHOLDS:
        hits = [a.label for a in all_arms
                if (r := ratio(a, ref)) is not None and r >= k and verdict(a, ref) == WITHIN]
        lines.append(f"- ≥{k}× fewer bytes and {WITHIN}: " + ("; ".join(hits) if hits else "none"))
    return lines


def frontier_markdown(study: Study, all_arms: Sequence[Arm], ref: Arm, how: str, metric: str,
                      figure: str | None = None) -> str:
    header = ["arm", "seeds", "diverged", f"final {metric}", "total bytes", "bytes/peer/round", "× fewer bytes",
              "verdict"]
    rows = []
    for arm in all_arms:
        r = ratio(arm, ref)
        rows.append([arm.label + (" (reference)" if arm is ref else ""), arm.group.status,
                     f"{arm.diverged}/{arm.group.n_done} diverged" if arm.diverged else "–",
                     cell(arm.interval),
                     _fmt_bytes(arm.total_bytes), _fmt_bytes(arm.bytes_per_peer_round),
                     "–" if r is None else f"{r:.3g}×", verdict(arm, ref)])
    parts = [f"# Bytes–accuracy frontier: {study.name}", "",
             f"Study folder `{study.path}`; metric `{metric}` (final eval), mean over the finished seeds [low, high] "
             f"(interval, n): the {CONFIDENCE:.0%} Student-t interval cut to the metric's range from {MIN_CI_SEEDS} "
             "seeds, the min–max of 2 (no confidence interval), none at 1; total bytes: every round's bytes_sent "
             "(all peers) summed over the run, mean over seeds; × fewer bytes: the reference's total / the arm's. "
             "Diverged: a round with a non-finite loss_mean (the arm keeps a finite final metric; a non-finite one "
             "is left out of the interval).", "", how + ".", "",
             "Rule: " + VERDICT_RULE + ".", "", _md_table(header, rows), "", *threshold_lines(all_arms, ref), ""]
    if figure:
        parts += [f"![frontier]({figure})", ""]
    return "\n".join(parts)


def plot_frontier(study: Study, all_arms: Sequence[Arm], ref: Arm, metric: str, path: Path) -> Path:
    """x: total bytes (log), y: the metric with its 95% interval; the reference's interval shaded, dotted lines at
    the reference's bytes / 10 and / 100; in analysis.style (matplotlib imported only when drawing)."""
    from .style import styled

    return styled(_plot_frontier)(study, all_arms, ref, metric, path)


def _plot_frontier(study: Study, all_arms: Sequence[Arm], ref: Arm, metric: str, path: Path) -> Path:
    from .metric_plots import metric_label
    from .style import PALETTE, new_figure, save

    fig = new_figure(9, 5.5)
    ax = fig.add_subplot(1, 1, 1)
    drawn = [a for a in all_arms if a.interval is not None and a.total_bytes]
    if ref.interval is not None:
        if ref.bounds() is not None and ref.bounds()[1] > ref.bounds()[0]:
            ax.axhspan(*ref.bounds(), color="0.85", zorder=0, label=f"reference {CONFIDENCE:.0%} interval")
        ax.axhline(ref.interval.value, color="0.5", lw=0.8, zorder=0)
    if ref.total_bytes:
        for k in THRESHOLDS:
            ax.axvline(ref.total_bytes / k, color="0.3", ls=":", lw=1, zorder=0)
            ax.text(ref.total_bytes / k, 1.0, f" ref/{k}", transform=ax.get_xaxis_transform(), fontsize=7,
                    va="top", ha="left", color="0.3")
    colour_keys = list(dict.fromkeys(next(iter(a.group.axes.values()), "") for a in drawn))
    colours = [PALETTE[colour_keys.index(next(iter(a.group.axes.values()), "")) % len(PALETTE)] for a in drawn]
    for arm, colour in zip(drawn, colours):
        iv = arm.interval
        low, high = (iv.value, iv.value) if iv.low is None or iv.high is None else (iv.low, iv.high)
        ax.errorbar([arm.total_bytes], [iv.value], yerr=[[iv.value - low], [high - iv.value]],
                    fmt="s" if arm is ref else "o",
                    color=colour, ms=5, capsize=3, lw=1, zorder=3, mfc="none" if arm.diverged else colour)
    ax.set_xscale("log")
    if drawn:
        xs = [a.total_bytes for a in drawn] + ([ref.total_bytes / 100] if ref.total_bytes else [])
        ax.set_xlim(min(xs) / 2, max(xs) * 3)
        low, high = ax.get_ylim()
        ax.set_ylim(low - 0.08 * (high - low), high + 0.05 * (high - low))
    ax.set_xlabel("total bytes sent over the run, all peers (mean over seeds; log)")
    kinds = sorted({a.interval.kind for a in drawn if a.interval.kind != NO_INTERVAL})
    ax.set_ylabel(f"final {metric_label(metric)} (mean; bars: {', '.join(kinds) or 'none'})")
    ax.set_title(f"{study.name}: bytes–{metric} frontier; reference {ref.short}"
                 + ("; hollow/†: diverged" if any(a.diverged for a in drawn) else ""), fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    if ref.bounds() is not None and ref.bounds()[1] > ref.bounds()[0]:
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    _place_labels(fig, ax, drawn, colours, ref)  # after the layout: the labels are placed in display space
    return save(fig, path)


#: Label positions tried in turn (offset in points from the point, horizontal alignment): beside, then above and
#: below, then further out; the first that covers no point and no label already placed is taken.
_OFFSETS = [(dx, dy) for step in range(0, 6) for dy in ((0,) if step == 0 else (9 * step, -9 * step))
            for dx in (7, -7)]


def _place_labels(fig, ax, drawn: Sequence[Arm], colours: Sequence, ref: Arm) -> None:
    """Annotate each point with its arm's labels where the text covers no point and no other label."""
    from .style import text_colour

    renderer = fig.canvas.get_renderer()
    points = [ax.transData.transform((a.total_bytes, a.interval.value)) for a in drawn]
    pad = 4.0
    taken = [(x - pad, y - pad, x + pad, y + pad) for x, y in points]

    def free(box) -> bool:
        return all(box[2] <= b[0] or box[0] >= b[2] or box[3] <= b[1] or box[1] >= b[3] for b in taken)

    for arm, colour in zip(drawn, colours):
        text = arm.short + (" (ref)" if arm is ref else "") + (" †" if arm.diverged else "")
        label = None
        for dx, dy in _OFFSETS:
            if label is not None:
                label.remove()
            label = ax.annotate(text, (arm.total_bytes, arm.interval.value), xytext=(dx, dy),
                                textcoords="offset points", fontsize=7, color=text_colour(colour),
                                ha="left" if dx > 0 else "right", va="center")
            ext = label.get_window_extent(renderer)
            box = (ext.x0, ext.y0, ext.x1, ext.y1)
            if free(box):
                break
        taken.append(box)


def write_frontier(study_dir: str | Path, metric: str | None = None, reference: str = DEFAULT_REFERENCE,
                   out: str | Path | None = None) -> tuple[str, list[Path]]:
    """Write frontier.csv, frontier.md and frontier.png into ``out``; return the markdown and the paths."""
    study = load_study(study_dir)
    metric = headline_metric(study, metric)
    if metric is None or metric not in study.metrics:
        raise StudyFolderError(f"no finished run reports the metric {metric!r}; they report: "
                               + (", ".join(study.metrics) or "nothing"))
    all_arms = arms(study, metric)
    ref, how = reference_arm(all_arms, reference)
    folder = Path(out) if out is not None else study.path / "frontier"
    png = plot_frontier(study, all_arms, ref, metric, folder / "frontier.png")
    text = frontier_markdown(study, all_arms, ref, how, metric, figure=png.name)
    write_atomic(folder / "frontier.csv", frontier_csv(study, all_arms, ref, metric))
    write_atomic(folder / "frontier.md", text)
    return text, [folder / "frontier.md", folder / "frontier.csv", png]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m analysis.frontier",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("study", metavar="STUDY_DIR")
    parser.add_argument("--metric", help="the final eval metric (default: the test, kNN or probe accuracy)")
    parser.add_argument("--reference", default=DEFAULT_REFERENCE,
                        help="label of the reference arm (full label, labels joined by '/', or one axis label)")
    parser.add_argument("--out", help="output folder (default: STUDY_DIR/frontier)")
    args = parser.parse_args(argv)
    return print_written("analysis.frontier",
                         lambda: write_frontier(args.study, args.metric, args.reference, args.out))

if __name__ == "__main__":
    sys.exit(main())
