"""The curious-reconstruction study's table and figure: how many peers colluding curious peers reconstruct from
gossip averaging, round by round, per graph size, number and placement of the curious peers
(docs/studies/curious-reconstruction.md).

    python -m analysis.reconstruction_study studies/curious-reconstruction --out docs/studies/curious-reconstruction

The table: per group, the mean over seeds of the peers reconstructed after 1, 3 and 5 rounds, each seed's first
round at which the final count was reached, the final count and how many of those no curious peer hears.
"""
from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from .study_cli import arguments, write_csv
from .style import colour, new_figure, save, styled

AT = (1, 3, 5)


def curves(study: Path) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """(size, curious, placement) -> each seed's {round: (reconstructed, non-neighbours)}, peers and curious."""
    plan = json.loads((study / "plan.json").read_text())
    out: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for point in plan["points"]:
        run = study / "runs" / point["name"]
        if not (run / "summary.json").exists():
            continue
        manifest = json.loads((run / "manifest.json").read_text())
        curve = {}
        for line in (run / "metrics.jsonl").read_text().splitlines():
            record = json.loads(line)
            metrics = record.get("metrics", record)
            if record.get("type") == "eval" and "curious_reconstructed" in metrics:
                curve[record["round"]] = (metrics["curious_reconstructed"],
                                          metrics["curious_reconstructed_non_neighbours"])
        axes = point["axes"]
        out[(str(axes["size"]), str(axes["curious"]), str(axes["curious_placement"]))].append(
            {"curve": curve, "peers": point["options"]["peers"], "curious": len(manifest["curious"]["peers"])})
    return out


def rows(groups: dict[tuple[str, str, str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The table's rows."""
    table = []
    for (size, curious, placement), runs in groups.items():
        finals = [r["curve"][max(r["curve"])] for r in runs]
        row: dict[str, Any] = {"size": size, "curious": curious, "placement": placement, "peers": runs[0]["peers"],
                               "curious_peers": runs[0]["curious"], "seeds": len(runs)}
        for t in AT:
            row[f"reconstructed_after_{t}"] = statistics.fmean(r["curve"].get(t, (0, 0))[0] for r in runs)
        row["rounds_to_final"] = " ".join(str(min(t for t, v in r["curve"].items() if v[0] == f[0]))
                                          for r, f in zip(runs, finals))
        row["reconstructed_final"] = " ".join(str(int(f[0])) for f in finals)
        row["non_neighbours_final"] = " ".join(str(int(f[1])) for f in finals)
        table.append(row)
    return table


@styled
def figure(groups: dict[tuple[str, str, str], list[dict[str, Any]]], path: Path) -> Path:
    """Per graph size, the mean share of non-curious peers reconstructed against the round, one line per number
    and placement of curious peers."""
    sizes = list(dict.fromkeys(k[0] for k in groups))
    fig = new_figure(4 * len(sizes), 3.6)
    styles = {"degree": "-", "centrality": "--", "random": ":"}
    for i, size in enumerate(sizes):
        ax = fig.add_subplot(1, len(sizes), i + 1)
        counts = list(dict.fromkeys(k[1] for k in groups if k[0] == size))
        for (s, curious, placement), runs in groups.items():
            if s != size:
                continue
            rounds = sorted(set().union(*(r["curve"] for r in runs)))
            share = [statistics.fmean(r["curve"].get(t, (0, 0))[0] / (r["peers"] - r["curious"]) for r in runs)
                     for t in rounds]
            ax.plot(rounds, share, styles.get(placement, "-"), color=colour(counts.index(curious)),
                    label=f"{curious}, {placement}")
        peers = next(runs[0]["peers"] for key, runs in groups.items() if key[0] == size)
        ax.set_title(f"{peers} peers (mean degree about 6)")
        ax.set_xlabel("round")
        ax.set_xlim(0, 15)
        ax.set_ylim(0, 1.02)
        if i == 0:
            ax.set_ylabel("non-curious peers reconstructed (share)")
        ax.legend(fontsize=6, title="curious, placement", title_fontsize=6)
    fig.tight_layout()
    return save(fig, path)


def main(argv: list[str] | None = None) -> int:
    args = arguments(__doc__, argv)
    groups = curves(args.study)
    if not groups:
        print(f"analysis.reconstruction_study: {args.study}: no finished runs")
        return 1
    table = rows(groups)
    write_csv(table, args.out)
    figure(groups, args.out.with_suffix(".png"))
    print(f"analysis.reconstruction_study: wrote {args.out.with_suffix('.csv')} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
