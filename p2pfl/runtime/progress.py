"""What rank 0 shows while a run goes: a progress bar (round, headline metric, ETA) and a closing summary."""
from __future__ import annotations

import sys
from typing import Any

from tqdm import tqdm

from p2pfl.records import Summary


class Progress:
    """A tqdm bar over rounds on rank 0; silent elsewhere or when disabled."""

    def __init__(self, total: int, enabled: bool, description: str) -> None:
        self._bar = tqdm(total=total, desc=description, unit="round", disable=not enabled, file=sys.stderr,
                         dynamic_ncols=True, mininterval=0.5) if total > 0 else None

    def update(self, **postfix: Any) -> None:
        if self._bar is None:
            return
        self._bar.set_postfix({k: _short(v) for k, v in postfix.items() if v is not None}, refresh=False)
        self._bar.update(1)

    def skip(self, rounds: int) -> None:
        """Mark rounds done before a resume."""
        if self._bar is not None and rounds > 0:
            self._bar.update(rounds)

    def write(self, line: str) -> None:
        if self._bar is not None:
            self._bar.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


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


def summary_lines(summary: Summary, method_lines: list[str]) -> str:
    """The closing summary printed once by rank 0: the run, its final metrics, the method's own lines."""
    parts = [f"p2pfl: {summary['algorithm']} on {summary['topology']} ({summary['peers']} peers, "
             f"{summary['rounds']} rounds) finished in {summary['wall_s']:.1f} s"]
    for key, value in summary["final"].items():
        if isinstance(value, (int, float)):
            parts.append(f"  {key:<28} {value:.6g}")
    net = summary.get("network")
    if net and (net["kind"] != "static" or net["crashed"] or net["links_per_round"] != net["topology_links_per_round"]):
        parts.append(f"  network ({net['kind']} topology): {net['links_per_round']:.1f} of "
                     f"{net['topology_links_per_round']:.1f} links used a round"
                     + (f"; crashed {net['crashed']} (not evaluated)" if net["crashed"] else ""))
    if "sim_time_s" in summary:
        parts.append(f"  simulated time               {summary['sim_time_s']:.6g} s")
    parts += [f"  {line}" for line in method_lines]
    parts.append(f"  run folder: {summary['run_dir']}")
    return "\n".join(parts)
