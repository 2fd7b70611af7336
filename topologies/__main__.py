"""``python -m topologies NAME -n K``: print a topology's statistics and draw it to a PNG."""
from __future__ import annotations

import argparse
import sys
from typing import Any

import topologies


def table(name: str, mixing: str, stats: dict[str, Any]) -> str:
    """The statistics as aligned ``key  value`` lines."""
    share = stats["consensus_share"]
    rows = [
        ("topology", name),
        ("mixing", mixing),
        ("peers", stats["n_nodes"]),
        ("edges", stats["n_edges"]),
        ("diameter", stats["diameter"]),
        ("degree min/mean/max", f"{stats['degree_min']} / {stats['degree_mean']:.2f} / {stats['degree_max']}"),
        ("|lambda2|", f"{stats['lambda2']:.4f}"),
        ("spectral gap", f"{stats['spectral_gap']:.4f}"),
        ("p (Koloskova et al.)", f"{stats['p']:.4f}"),
        (f"n_eff (gamma {stats['n_eff_gamma']})", "n/a (W not symmetric)" if stats["n_eff"] is None
         else f"{stats['n_eff']:.2f}"),
        ("consensus share min/max", f"{min(share):.4f} / {max(share):.4f} (ideal {1 / len(share):.4f})"),
        ("symmetric", stats["symmetric"]),
        ("doubly stochastic", stats["doubly_stochastic"]),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    lines += [f"{'estimated':<{width}}  {note}" for note in stats.get("estimated", [])]
    lines.append("share per peer: " + " ".join(f"{i}:{s:.3f}" for i, s in enumerate(share)))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, build the topology, print its statistics and write the PNG."""
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m topologies", description=__doc__)
    parser.add_argument("name", help="one of: " + ", ".join(
        c for c in topologies.choices() if c.split()[0] in topologies.registry))  # "cycle (ring)": with its aliases
    parser.add_argument("-n", type=int, required=True, help="number of peers K")
    parser.add_argument("--p", type=float, default=None, help="edge probability (random)")
    parser.add_argument("--max-tries", type=int, default=None, help="redraws of a disconnected random graph")
    parser.add_argument("--rows", type=int, default=None, help="rows of the 2-D grid (torus, grid)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mixing", default="metropolis", help=", ".join(topologies.MIXING_KINDS))
    parser.add_argument("--graph-file", default=None, help="edge list, adjacency matrix or .graphml (file)")
    parser.add_argument("--n-eff-gamma", type=float, default=topologies.N_EFF_GAMMA, help="decay of n_eff")
    parser.add_argument("--out", default=None, help="PNG path (default <name>-<K>.png)")
    args = parser.parse_args(argv)
    name = topologies.base.canonical(args.name)  # an alias as the name it stands for (ring: cycle)
    try:
        graph = topologies.build(name, args.n, args.seed, p=args.p, max_tries=args.max_tries, path=args.graph_file,
                                 rows=args.rows)
        w = topologies.mixing_matrix(graph, args.mixing)
    except topologies.TopologyError as exc:
        parser.error(str(exc))
    print(table(name, args.mixing, topologies.statistics(graph, w, args.n_eff_gamma)))
    out = topologies.draw(graph, w, args.out or f"{name}-{args.n}.png")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

