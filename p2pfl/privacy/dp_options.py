"""DP-SGD's options (`--dp-clip C` with `--dp-noise SIGMA` or `--dp-epsilon EPS`, `--dp-delta DELTA`) and its rules
on the rest of a run; a light module (no torch), read by the configuration. The mechanism is
p2pfl.privacy.dp_sgd, its accountant p2pfl.privacy.accountant (docs/privacy.md)."""
from __future__ import annotations

import os
from typing import Any

import yaml

from p2pfl.capabilities import PER_SAMPLE
from p2pfl.options import Check, method_options, opt

SECTION = "dp-sgd"


@method_options(SECTION)
class DPOptions:
    """DP-SGD (Abadi et al. 2016) on every local step of every peer: on when --dp-clip is given."""

    dp_clip: float | None = opt(None, "DP-SGD on: clip each sample's gradient to this L2 norm C (all trainable "
                                      "parameters jointly)", section=SECTION, bounds="> 0")
    dp_noise: float | None = opt(None, "DP-SGD's noise multiplier sigma: Gaussian noise N(0, sigma^2 C^2) on each "
                                       "step's sum of clipped gradients", section=SECTION, bounds="> 0")
    dp_epsilon: float | None = opt(None, "DP-SGD's target epsilon of each peer over the run: sigma solved for it, "
                                         "per peer (instead of --dp-noise); at most 709, where the guarantee's "
                                         "factor e^epsilon leaves what a double can hold", section=SECTION,
                                   bounds="(0, 709]")
    dp_delta: float = opt(1e-5, "DP-SGD's delta of the (epsilon, delta) accounted (and of --dp-epsilon)",
                          section=SECTION, bounds="(0, 1)")

    def validate(self, check: Check) -> None:
        on = self.dp_clip is not None
        for name in ("dp_noise", "dp_epsilon"):
            check(on or getattr(self, name) is None, name, "DP-SGD needs the clipping norm too: give --dp-clip C")
        check(not on or self.dp_noise is not None or self.dp_epsilon is not None, "dp_clip",
              "DP-SGD needs its noise too: give --dp-noise SIGMA or --dp-epsilon EPSILON")
        check(self.dp_noise is None or self.dp_epsilon is None, "dp_noise",
              "give --dp-noise SIGMA or --dp-epsilon EPSILON (which solves for sigma), not both")


def dp_on(cfg: Any) -> bool:
    """Whether the run trains with DP-SGD."""
    return getattr(cfg, "dp_clip", None) is not None


def check_run(cfg: Any, check: Check, method: Any) -> None:
    """DP-SGD's rules on the rest of the run: a method whose loss is a mean of per-sample terms (its capability
    PER_SAMPLE); a --dp-epsilon run resumed only to the rounds its σ was solved for."""
    if not dp_on(cfg):
        return
    check(method.can(PER_SAMPLE), "dp_clip", f"DP-SGD clips each sample's gradient; --algorithm {cfg.algorithm} "
                                             f"cannot take it ({method.why_not(PER_SAMPLE)})")
    planned = _planned_rounds(cfg.resume) if cfg.resume is not None and cfg.dp_epsilon is not None else None
    check(planned is None or planned == cfg.rounds, "rounds",
          f"--dp-epsilon {cfg.dp_epsilon}: the run's sigma was solved to spend it over its {planned} rounds; resume "
          f"it with --rounds {planned}, or start a new run for {cfg.rounds}")


def _planned_rounds(run_dir: str) -> int | None:
    """The --rounds a run folder's config.yaml holds (None when unreadable: check_resume names that)."""
    try:
        with open(os.path.join(run_dir, "config.yaml"), encoding="utf-8") as fh:
            rounds = yaml.safe_load(fh).get("rounds")
    except (OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError):
        return None
    return rounds if isinstance(rounds, int) else None
