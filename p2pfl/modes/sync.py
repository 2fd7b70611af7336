"""--mode sync: rounds. Every active peer trains, then the network mixes; --rounds and --eval-every count them."""
from __future__ import annotations

from typing import Any

from p2pfl.modes import MODES, Mode
from p2pfl.options import Check


@MODES.register("sync")
class Sync(Mode):
    """Synchronous rounds (the clock, when kept, times each round)."""

    runs_with = "p2pfl.runner:Runner"

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        for name in ("sim_time", "updates", "eval_every_s"):
            check(not getattr(cfg, name), name, "belongs to --mode async (synchronous runs count --rounds and "
                                                "--eval-every)")
