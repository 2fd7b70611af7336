"""What a run was: versions, commit, command line, seeds, where each peer ran, the topology."""
from __future__ import annotations

import importlib.metadata
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from p2pfl.records import BaseManifest, Host, NetworkManifest, Seeds, TopologyRecord
from p2pfl.version import __version__


def versions() -> dict[str, str]:
    """Versions of Python, the libraries and the MPI library this run used."""
    out = {"python": platform.python_version(), "p2pfl": __version__}
    for name in ("torch", "torchvision", "numpy", "networkx", "mpi4py", "transformers", "peft"):
        module = sys.modules.get(name)
        if module is not None:
            out[name] = getattr(module, "__version__", "unknown")
            continue
        try:  # the installed distribution's version, without importing it (transformers takes seconds)
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:  # a missing optional library is recorded, not fatal
            out[name] = "absent"
    try:
        from mpi4py import MPI
        out["mpi"] = MPI.Get_library_version().splitlines()[0].strip()
    except Exception:  # noqa: BLE001
        pass
    try:
        import torch
        out["cuda"] = str(torch.version.cuda)
    except Exception:  # noqa: BLE001
        pass
    return out


def git_commit() -> str | None:
    """The commit of the p2pfl checkout, with '-dirty' when it has uncommitted changes."""
    root = Path(__file__).resolve().parents[2]  # the checkout: p2pfl/runtime/manifest.py
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (commit + ("-dirty" if dirty else "")) or None


def base_manifest(cfg_dict: dict[str, Any], world_size: int, hosts: list[Host], topology: TopologyRecord,
                  network: NetworkManifest, seeds: Seeds, method_defaults: dict[str, Any]) -> BaseManifest:
    """The manifest every run writes at start; the method adds its entries later (RunContext.record_manifest)."""
    return BaseManifest(command=sys.argv, world_size=world_size, config=cfg_dict, versions=versions(),
                        git_commit=git_commit(), seeds=seeds, hosts=hosts, topology=topology, network=network,
                        method_defaults=method_defaults)
