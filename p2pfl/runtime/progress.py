"""What rank 0 shows while a run goes: the rounds' progress (round, ETA, the round's headline and the last
evaluation's, with the round it is from: `eval @r40: test_acc_peer_mean=0.61, test_acc_avg=0.9` on a line printed
at round 43) and a closing summary table; they reach the console through p2pfl's logger (p2pfl.runtime.console).

On a terminal the progress is a tqdm bar; anywhere else (a Slurm log, a pipe, a notebook's captured stream) a
bar's carriage-return frames would pile up, so it is a line every tenth of the run (PROGRESS_LINES lines) instead.
"""
from __future__ import annotations

import logging
import math
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

from p2pfl.records import AVG, BOOKKEEPING, COUNT, PEER_MAX, PEER_MEAN, PEER_MIN, UNTRAINED, Summary

log = logging.getLogger(__name__)
_IMPORTED = time.time()  # process_started's fallback

#: Lines the progress writes over a run when stderr is not a terminal.
PROGRESS_LINES = 10
#: The evaluation metrics the progress shows, the first that an evaluation reports (its peers' mean and its
#: average model's value, where it has them); else its first metric over peers.
EVAL_HEADLINES = ("test_acc", "knn_acc", "probe_acc", "task_metric", "distance_to_mean")


def eval_headline(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The headline of an evaluation's metrics: `<name>_peer_mean` and `<name>_avg` of the first of EVAL_HEADLINES
    it reports (else of its first metric with either), by their record names."""
    names = [*EVAL_HEADLINES, *(k.removesuffix(PEER_MEAN).removesuffix(AVG) for k in metrics
                                if k.endswith((PEER_MEAN, AVG)))]
    for name in names:
        shown = {key: metrics[key] for key in (name + PEER_MEAN, name + AVG) if isinstance(metrics.get(key), float)}
        if shown:
            return shown
    return {}


class Progress:
    """Rank 0's view of the rounds: a tqdm bar on a terminal, else a line every `total / PROGRESS_LINES` rounds
    and at the last (no carriage returns); nothing when disabled or when the console shows no info (--quiet)."""

    def __init__(self, total: int, enabled: bool, description: str) -> None:
        self.total, self.description, self.done, self.skipped = total, description, 0, 0
        self.enabled = enabled and total > 0 and log.isEnabledFor(logging.INFO)
        self.every = max(1, math.ceil(total / PROGRESS_LINES))
        self.started = time.perf_counter()
        self.evaluation: dict[str, float] = {}
        self.evaluated_at: int | None = None
        self._bar = None
        if self.enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=description, unit="round", file=sys.stderr, dynamic_ncols=True,
                             mininterval=0.5)

    def evaluated(self, metrics: Mapping[str, Any] | None, round: int | None = None) -> None:
        """An evaluation's metrics, made at ``round``: their headline is shown from the next round on, with the
        round it is from (``eval @r40:`` on a line printed at round 43)."""
        self.evaluation = eval_headline(metrics or {})
        self.evaluated_at = round if self.evaluation else None

    def update(self, **postfix: Any) -> None:
        """One round done, with the round's own numbers to show (None: left out)."""
        self.done += 1
        own = {k: v for k, v in postfix.items() if v is not None}
        at = {} if self.evaluated_at is None else {"eval": f"@r{self.evaluated_at}"}
        if self._bar is not None:
            self._bar.set_postfix({k: _short(v) for k, v in {**own, **at, **self.evaluation}.items()}, refresh=False)
            self._bar.update(1)
        elif self.enabled and (self.done % self.every == 0 or self.done == self.total):
            elapsed = time.perf_counter() - self.started
            rounds = self.done - self.skipped
            eta = elapsed / rounds * (self.total - self.done) if rounds else float("nan")
            parts = [", ".join(f"{k}={_short(v)}" for k, v in own.items()),
                     (f"eval @r{self.evaluated_at}: " if at else "")
                     + ", ".join(f"{k}={_short(v)}" for k, v in self.evaluation.items())]
            numbers = "; ".join(p for p in parts if p and not p.endswith(": "))
            log.info(f"p2pfl: {self.description}: round {self.done}/{self.total}, {elapsed:.1f} s, "
                     f"ETA {eta:.0f} s" + (f"; {numbers}" if numbers else ""))

    def skip(self, rounds: int) -> None:
        """Mark rounds done before a resume."""
        if rounds > 0:
            self.done += rounds
            self.skipped = rounds
            if self._bar is not None:
                self._bar.update(rounds)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def placement_table(hosts: list[dict]) -> str:
    """Rank → host → device → peers, one line each."""
    lines = [f"{'rank':>4}  {'host':<20} {'device':<8} peers"]
    for h in hosts:
        peers = h["peers"]
        span = f"{peers[0]}..{peers[-1]}" if len(peers) > 2 else ",".join(map(str, peers))
        lines.append(f"{h['rank']:>4}  {h['host']:<20} {h['device']:<8} {span}")
    return "\n".join(lines)


def format_bytes(n: float) -> str:
    """A byte count in B, KiB, MiB or GiB."""
    unit = "B"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            break
        n /= 1024
    return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"


#: The summary table's columns: a final metric's key ends in the suffix of its column (`value`: none of them).
COLUMNS = (("", "value"), (AVG, "average model"), (PEER_MEAN, "peers' mean"), (PEER_MIN, "peers' min"),
           (PEER_MAX, "peers' max"), (UNTRAINED, "untrained"))


def metric_table(final: Mapping[str, Any]) -> list[str]:
    """The final metrics as an aligned table: a row per metric's base name, a column per model or statistic
    (COLUMNS; the empty ones left out); bookkeeping (how many peers were scored, counts) left out."""
    rows: dict[str, dict[str, float]] = {}
    for key, value in final.items():
        if key in BOOKKEEPING or key.endswith(COUNT) or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        suffix = next((s for s, _ in COLUMNS[1:] if key.endswith(s)), "")
        rows.setdefault(key.removesuffix(suffix) if suffix else key, {})[suffix] = float(value)
    if not rows:
        return []
    columns = [(s, title) for s, title in COLUMNS if any(s in row for row in rows.values())]
    cells = [["metric", *(title for _, title in columns)]]
    cells += [[name, *(f"{row[s]:.4g}" if s in row else "" for s, _ in columns)] for name, row in rows.items()]
    widths = [max(len(line[i]) for line in cells) for i in range(len(cells[0]))]
    return ["  ".join([line[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(line[1:], widths[1:]))]).rstrip()
            for line in cells]


def process_started() -> float:
    """When this process started (time.time()'s clock): from /proc on Linux (its start in clock ticks after boot,
    against the uptime), so that the interpreter's start and every import count; elsewhere when this module was
    imported."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22, counted after the command name
            age = float(uptime.read().split()[0]) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - max(age, 0.0)
    except (OSError, ValueError, IndexError):
        return _IMPORTED


def summary_lines(summary: Summary, method_lines: list[str], whole: tuple[str, float] | None = None) -> str:
    """The closing summary shown once by rank 0: the run and what its times count (the rounds with their
    evaluations; `whole`: the whole command's or call's, a format string of its seconds and the seconds), the
    final metrics as a table, the network, the method's own lines, the run folder."""
    timing = f"rounds and evaluations {summary['wall_s']:.1f} s"
    if whole is not None:
        timing += "; " + whole[0].format(whole[1])
    parts = [f"p2pfl: {summary['algorithm']} on {summary['topology']} ({summary['peers']} peers, "
             f"{summary['rounds']} rounds): {timing}"]
    parts += [f"  {line}" for line in metric_table(summary["final"])]
    net = summary.get("network")
    if net and (net["kind"] != "static" or net["crashed"] or net["links_per_round"] != net["topology_links_per_round"]):
        parts.append(f"  network ({net['kind']} topology): {net['links_per_round']:.1f} of "
                     f"{net['topology_links_per_round']:.1f} links used a round"
                     + (f"; crashed {net['crashed']} (not evaluated)" if net["crashed"] else ""))
    if "sim_time_s" in summary:
        parts.append(f"  simulated time: {summary['sim_time_s']:.6g} s")
    parts += [f"  {line}" for line in method_lines]
    parts.append(f"  run folder: {summary['run_dir']}")
    return "\n".join(parts)
