"""Build a set-up algorithm inside the test process (one MPI rank, every peer local), as p2pfl.run does."""
from __future__ import annotations

from pathlib import Path

from p2pfl.comm.world import World
from p2pfl.config import make_config, resolve
from p2pfl.method import Algorithm
from p2pfl.run import build_algorithm, build_context
from p2pfl.runtime.device import configure_determinism

_WORLD: World | None = None

#: Small, quiet runs on the synthetic dataset unless a test says otherwise.
DEFAULTS = {"dataset": "synthetic", "peers": 4, "rounds": 1, "progress": False, "plots": False}


def world() -> World:
    global _WORLD
    if _WORLD is None:
        _WORLD = World.detect()
    return _WORLD


def setup_algorithm(out: Path, **options) -> Algorithm:
    """The set-up algorithm of `options` (RunConfig fields over DEFAULTS), its run folder under `out`; its
    context is `.ctx`."""
    cfg = make_config(**{**DEFAULTS, "out": str(out), **options})
    ctx = build_context(world(), resolve(cfg, world().size), announce=False)
    configure_determinism(cfg.threads, ctx.device)
    return build_algorithm(ctx)
