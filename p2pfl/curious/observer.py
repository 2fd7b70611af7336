"""The curious peers' attack of a run, attached to its message pipeline: placed once the method is set up (the
attack reads what it needs of it then), handed every inbox the checked exchange delivers, and scored at every
evaluation by the runner. None, and nothing attached, without --curious."""
from __future__ import annotations

from p2pfl.context import RunContext
from p2pfl.curious import CURIOUS, CuriousAttack
from p2pfl.curious.placement import choose_curious
from p2pfl.method import Algorithm
from p2pfl.registry import options_of


def watch(ctx: RunContext, algorithm: Algorithm) -> CuriousAttack | None:
    """The run's curious attack, observing every exchange from now on (its peers in the manifest's `curious`)."""
    cfg = ctx.cfg
    if cfg.curious is None:
        return None
    curious = choose_curious(cfg.curious, ctx.graph, cfg.curious_placement, cfg.seed)
    cls = CURIOUS.get(cfg.curious_attack)
    attack = cls(ctx, algorithm, curious, options_of(cls, cfg))
    ctx.checked.observers.append(attack.observe)
    ctx.record_manifest(curious={"attack": cls.name, "peers": sorted(curious), "placement": cfg.curious_placement})
    return attack
