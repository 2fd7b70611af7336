"""--mode async: AD-PSGD (Lian et al. 2018; p2pfl.async_gossip). Each peer computes, then averages with one
neighbour, in simulated-time order: it keeps the clock, and runs on a static network of peers always up, mixing by
the plain pairwise mean."""
from __future__ import annotations

from typing import Any

from p2pfl.byzantine.aggregators import AGGREGATORS
from p2pfl.capabilities import ASYNCHRONOUS
from p2pfl.gossip.compress import CODECS
from p2pfl.gossip.schemes.base import PLAIN_MIX, SCHEMES
from p2pfl.modes import MODES, Mode
from p2pfl.options import Check, catalogue


@MODES.register("async")
class Async(Mode):
    """Asynchronous pairwise gossip in simulated time (AD-PSGD)."""

    paper = "Lian et al. 2018"
    runs_with = "p2pfl.async_gossip:AsyncRunner"

    @classmethod
    def keeps_clock(cls, cfg: Any) -> bool:
        return True  # its events are ordered by simulated time

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        method = catalogue().get(cfg.algorithm, cfg)
        check(method.can(ASYNCHRONOUS), "mode",
              f"{cfg.algorithm} has no asynchronous form ({method.why_not(ASYNCHRONOUS)})")
        check(cfg.compute_time > 0 or cfg.compute_trace is not None, "mode",
              "async orders its events by simulated time: give --compute-time or --compute-trace")
        plain = PLAIN_MIX in SCHEMES.get(cfg.gossip).capabilities
        check(plain and "dense" in CODECS.get(cfg.compress).capabilities, "mode",
              "async averages pairwise with dense models: --gossip average, --compress none")
        check(cfg.gossip_steps == 1, "gossip_steps", "async averages each event's pair once: use --gossip-steps 1")
        plain_mean = "linear" in AGGREGATORS.get(cfg.aggregator).capabilities
        check(cfg.byzantine is None and plain_mean and cfg.mixing != "server" and not cfg.weight_by_data, "mode",
              "async averages pairwise by the plain mean: not with --byzantine, a robust --aggregator, --mixing server "
              "or --weight-by-data")
        check(cfg.link_failure == 0 and cfg.churn == 0 and cfg.crash is None and cfg.participation == 1.0
              and not cfg.resample, "mode", "async runs on a static network of peers always up: not with "
                                            "--link-failure, --churn, --crash, --participation or --resample")
        check(cfg.schedule == "constant", "schedule",
              "--mode async counts no common rounds for a learning-rate schedule: use --schedule constant")
        check(cfg.fedbn == "off", "fedbn", "--mode async averages and updates the whole model: use --fedbn off")
        check(cfg.fault is None or cfg.fault.startswith("raise@"), "fault",
              "--mode async injects only raise@RANK:ROUND (a round: a batch of its events)")

    @classmethod
    def check_network(cls, cfg: Any, schedule: Any) -> None:
        if schedule.kind != "static" or schedule.directed:
            raise ValueError(f"--mode async: averages pairwise over a static undirected graph; --topology "
                             f"{cfg.topology} is {'one-way' if schedule.directed else 'a changing network'}")
