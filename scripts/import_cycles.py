"""Import cycles among the project's modules: `python scripts/import_cycles.py [--type-checking] [--root DIR]
[PACKAGE ...]` (default: p2pfl analysis topologies) prints every strongly connected component of the import graph,
of modules and of folders.

Every `import` and `from ... import` counts, at module level or inside a function (a lazy import still ties the
two modules together), except those under `if TYPE_CHECKING:` unless --type-checking is given. `from a.b
import c` is an edge to the module a.b.c when that is a module, else to a.b. The folder graph merges the modules
of each subpackage (p2pfl/data/* is one node `p2pfl.data`; modules at a package's top stay themselves), so it
shows loops such as a module that imports a subpackage which imports it back. Exits 1 when there is a cycle.
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ("p2pfl", "analysis", "topologies")


def modules(packages: list[str], root: Path = ROOT) -> dict[str, Path]:
    """Module name -> file, for every .py file of the packages."""
    out: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imported(path: Path, name: str, known: dict[str, Path], type_checking: bool = False) -> set[str]:
    """The known modules `path` (module `name`) imports anywhere (under `if TYPE_CHECKING:` only with
    `type_checking`)."""
    skipped: set[int] = set()
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if not type_checking and _type_checking(node):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import a.b.c` of a name inside a module: the module
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def graphs(packages: list[str], root: Path = ROOT, type_checking: bool = False) -> tuple[nx.DiGraph, nx.DiGraph]:
    """(module graph, folder graph)."""
    known = modules(packages, root)
    mod = nx.DiGraph()
    mod.add_nodes_from(known)
    for name, path in known.items():
        mod.add_edges_from((name, target) for target in imported(path, name, known, type_checking))

    def folder(name: str) -> str:  # p2pfl.data.tasks -> p2pfl.data; p2pfl.rounds stays itself
        return ".".join(name.split(".")[:2])

    fold = nx.DiGraph()
    for a, b in mod.edges:
        fa, fb = folder(a), folder(b)
        if fa != fb:
            fold.add_edge(fa, fb)
    return mod, fold


def cycles(graph: nx.DiGraph) -> list[list[str]]:
    """The strongly connected components with more than one node, each sorted, largest first."""
    return sorted((sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1), key=lambda c: -len(c))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("packages", nargs="*", default=list(DEFAULT))
    parser.add_argument("--type-checking", action="store_true", help="count imports under `if TYPE_CHECKING:`")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to read (default: this one)")
    args = parser.parse_args(argv)
    mod, fold = graphs(args.packages, args.root, args.type_checking)
    found = 0
    for title, graph in (("modules", mod), ("folders", fold)):
        comps = cycles(graph)
        found += len(comps)
        print(f"{title}: {len(comps)} cycle(s)")
        for comp in comps:
            print("  " + " <-> ".join(comp))
            members = set(comp)
            for a, b in sorted(graph.subgraph(members).edges):
                print(f"      {a} -> {b}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
