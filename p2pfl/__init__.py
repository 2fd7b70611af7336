"""p2pfl: a decentralised peer-to-peer learning simulator (distribution name ``p2pfl-sim``).

``p2pfl.simulate(**options)`` runs one job in this process and returns its run folder as an analysis Run
(p2pfl.simulation); it is imported on first use, so ``import p2pfl`` stays light (no torch).
"""
from __future__ import annotations

from typing import Any

from p2pfl.version import __version__

__all__ = ["simulate", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "simulate":
        from p2pfl.simulation import simulate

        return simulate
    raise AttributeError(f"module 'p2pfl' has no attribute {name!r}")
