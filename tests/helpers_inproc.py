"""Build a run context and algorithm inside the test process (one MPI rank, every peer local)."""
from __future__ import annotations

from pathlib import Path

from p2pfl.comm.world import World
from p2pfl.config import make_config, resolve
from p2pfl.rounds import Algorithm, RunContext
from p2pfl.run import build_algorithm, build_context

_WORLD: World | None = None


def world() -> World:
    global _WORLD
    if _WORLD is None:
        _WORLD = World.detect()
    return _WORLD


def setup_algorithm(out: Path, **options) -> tuple[RunContext, Algorithm]:
    """A set-up algorithm for `options` (RunConfig fields), its run folder under `out`."""
    defaults = {"dataset": "synthetic", "peers": 4, "rounds": 1, "progress": False, "plots": False,
                "out": str(out)}
    cfg = make_config(**{**defaults, **options})
    ctx = build_context(world(), resolve(cfg, world().size), announce=False)
    return ctx, build_algorithm(ctx)
