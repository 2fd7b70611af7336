"""DP-SGD's accountant: the Rényi DP of the Poisson-subsampled Gaussian mechanism (Mironov, Talwar, Zhang 2019)
composed over a peer's steps and converted to (epsilon, delta), by Opacus's RDPAccountant used on its own.

Orders: the integers 2..256 (ORDERS), where the subsampled Gaussian's RDP has the closed binomial form of Mironov et
al. 2019; fractional orders would tighten epsilon slightly, integer ones keep the bound checkable by a reference
written from the paper (tests/test_privacy_dp_sgd.py). Conversion to (epsilon, delta): Opacus's (Balle et al. 2020,
Prop. 12 / Canonne, Kamath, Steinke 2020), which is below Mironov's 2017 conversion.
"""
from __future__ import annotations

import functools
import warnings

#: The Rényi orders the accountant minimises over.
ORDERS = tuple(range(2, 257))
#: The accountant as the records name it.
NAME = "rdp"


@functools.lru_cache(maxsize=4096)
def epsilon(sigma: float, rate: float, steps: int, delta: float) -> float:
    """The epsilon of `steps` steps of the Gaussian mechanism of noise multiplier `sigma` on a Poisson sample of
    rate `rate` (0 for no step), at `delta`."""
    if steps == 0:
        return 0.0
    from opacus.accountants import RDPAccountant

    accountant = RDPAccountant()
    accountant.history = [(float(sigma), float(rate), int(steps))]
    with warnings.catch_warnings():  # "optimal order is the largest alpha": a looser bound, still a bound
        warnings.simplefilter("ignore")
        return float(accountant.get_epsilon(delta=delta, alphas=list(ORDERS)))


@functools.lru_cache(maxsize=1024)
def noise_for(target: float, delta: float, rate: float, steps: int) -> float:
    """The noise multiplier whose `steps` steps at sampling rate `rate` spend at most `target` epsilon at `delta`
    (within 0.01 below it: Opacus's bisection); ValueError (one line) when no noise can."""
    from opacus.accountants.utils import get_noise_multiplier

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return float(get_noise_multiplier(target_epsilon=target, target_delta=delta, sample_rate=rate,
                                              steps=steps, accountant=NAME, alphas=list(ORDERS)))
        except ValueError as exc:
            raise ValueError(f"--dp-epsilon: {target} is out of reach for {steps} steps at sampling rate "
                             f"{rate:.4g} and delta {delta} ({exc})") from None
