"""The privacy-utility-topology study's table and figure: per topology and mechanism, the network average's test
accuracy (and the peers' mean accuracy beside it), the mechanism's own ε and the curious peers' membership-inference
AUC, each as a mean and an interval over seeds (analysis.intervals: the 95% Student-t interval cut to the
quantity's range from 3 seeds, the min–max of 2, none for 1; docs/studies/privacy-utility-topology-cpu.md).

    python -m analysis.privacy_study studies/privacy-utility-topology-cpu \
        --out docs/studies/privacy-utility-topology-cpu

ε is each mechanism's own accountant's: DP-SGD's largest per-peer ε (RDP, the last round's record), Muffliato's
pairwise network-DP ε averaged over pairs, Decor's largest per-peer SecLDP ε; runs without a mechanism have none.
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from .intervals import NO_INTERVAL, estimate
from .study_cli import arguments, write_csv
from .style import colour, new_figure, save, styled

AXES = ("topology", "mechanism")


def _epsilon(run: Path, summary: dict[str, Any]) -> float | None:
    """The run's ε by its mechanism's own accountant (None: no mechanism)."""
    if "muffliato_eps_mean" in summary:
        return float(summary["muffliato_eps_mean"])
    if "decor_eps_max" in summary:
        return float(summary["decor_eps_max"])
    last = None
    for line in (run / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("type") == "round" and "dp_epsilon" in record:
            last = record
    return None if last is None else float(max(last["dp_epsilon"].values()))


#: Each number's range, where its interval is cut (ε: none above).
RANGES = {"test_acc_avg": (0.0, 1.0), "test_acc_peer_mean": (0.0, 1.0), "mia_auc": (0.0, 1.0), "epsilon": (0.0, None)}


def _interval(name: str, values: list[float]) -> dict[str, Any]:
    """``name``, ``name_low``, ``name_high`` and ``name_interval`` (its kind) of the values (analysis.intervals);
    nan where there is none."""
    est = estimate(values, bounds=RANGES[name])
    if est is None:
        return {name: math.nan, f"{name}_low": math.nan, f"{name}_high": math.nan, f"{name}_interval": NO_INTERVAL}
    low, high = (math.nan, math.nan) if est.low is None or est.high is None else (est.low, est.high)
    return {name: est.value, f"{name}_low": low, f"{name}_high": high, f"{name}_interval": est.kind}


def rows(study: Path) -> list[dict[str, Any]]:
    """One row per (topology, mechanism): the three numbers' means and intervals, in the plan's order."""
    plan = json.loads((study / "plan.json").read_text())
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for point in plan["points"]:
        run = study / "runs" / point["name"]
        if not (run / "summary.json").exists():
            continue
        summary = json.loads((run / "summary.json").read_text())
        final = summary["final"]
        key = (str(point["axes"]["topology"]), str(point["axes"]["mechanism"]))
        groups[key].append({"acc": final["test_acc_avg"], "peers": final["test_acc_peer_mean"],
                            "auc": final.get("curious_mia_auc_peer_mean"), "eps": _epsilon(run, summary)})
    out = []
    for (topology, mechanism), runs in groups.items():
        row: dict[str, Any] = {"topology": topology, "mechanism": mechanism, "seeds": len(runs)}
        for name, field in (("test_acc_avg", "acc"), ("test_acc_peer_mean", "peers"), ("mia_auc", "auc"),
                            ("epsilon", "eps")):
            row.update(_interval(name, [r[field] for r in runs if r[field] is not None]))
        out.append(row)
    return out


@styled
def figure(table: list[dict[str, Any]], path: Path) -> Path:
    """Three panels (the peers' mean accuracy, ε, MIA AUC), mechanisms on the x axis, one bar per topology with its
    interval."""
    topologies = list(dict.fromkeys(r["topology"] for r in table))
    mechanisms = list(dict.fromkeys(r["mechanism"] for r in table))
    fig = new_figure(12, 3.8)
    panels = (("test_acc_peer_mean", "test accuracy, peers' own models (mean)"),
              ("epsilon", "ε (the mechanism's accountant, δ = 1e-5)"),
              ("mia_auc", "membership-inference AUC (0.5: no leak seen)"))
    width = 0.8 / len(topologies)
    for i, (field, label) in enumerate(panels):
        ax = fig.add_subplot(1, 3, i + 1)
        for j, topology in enumerate(topologies):
            by = {r["mechanism"]: r for r in table if r["topology"] == topology}
            xs = [k + (j - (len(topologies) - 1) / 2) * width for k in range(len(mechanisms))]
            ys = [by[m][field] if m in by else math.nan for m in mechanisms]
            heights = [0 if math.isnan(y) else y for y in ys]
            below = [by[m][field] - by[m][field + "_low"] if m in by else math.nan for m in mechanisms]
            above = [by[m][field + "_high"] - by[m][field] if m in by else math.nan for m in mechanisms]
            ax.bar(xs, heights, width, yerr=[[0 if math.isnan(e) else e for e in below],
                                             [0 if math.isnan(e) else e for e in above]],
                   color=colour(j), label=topology, capsize=2)
        if field == "mia_auc":
            ax.axhline(0.5, color="grey", linestyle="--", linewidth=1)
            ax.set_ylim(0.4, 0.65)
        ax.set_xticks(range(len(mechanisms)), mechanisms, rotation=20)
        ax.set_ylabel(label)
        if i == 0:  # above the panel, off the bars
            ax.legend(title="topology", loc="lower left", bbox_to_anchor=(0.0, 1.02), ncol=len(topologies),
                      borderaxespad=0.0)
    fig.tight_layout()
    return save(fig, path)


def _span(row: dict[str, Any], name: str) -> str:
    """``0.414 [0.16, 0.66]``, or the value alone where it has no interval."""
    if math.isnan(row[f"{name}_low"]):
        return f"{row[name]:.3f}"
    return f"{row[name]:.3f} [{row[f'{name}_low']:.3g}, {row[f'{name}_high']:.3g}]"


def main(argv: list[str] | None = None) -> int:
    args = arguments(__doc__, argv)
    table = rows(args.study)
    if not table:
        print(f"analysis.privacy_study: {args.study}: no finished runs")
        return 1
    write_csv(table, args.out)
    figure(table, args.out.with_suffix(".png"))
    for r in table:
        print(f"{r['topology']:>11} {r['mechanism']:>12}  peers' acc {_span(r, 'test_acc_peer_mean')}"
              f"  network-average acc {_span(r, 'test_acc_avg')}  eps {r['epsilon']:.3g}"
              f"  auc {_span(r, 'mia_auc')}  ({r['test_acc_avg_interval']}, n={r['seeds']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
