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


#: Noise multipliers the search for a target epsilon tries: it starts at SIGMA_START and doubles up to SIGMA_MAX
#: (Opacus's range: beyond 10^6 no target is reachable in any useful run).
SIGMA_START, SIGMA_MAX = 10.0, 1e6
#: The search stops once epsilon is within max(EPS_TOLERANCE, EPS_RELATIVE x target) below the target (Opacus's
#: 0.01 alone is not reachable in floating point for a target beyond about 10^13, and its search never ended)...
EPS_TOLERANCE, EPS_RELATIVE = 0.01, 1e-6
#: ... or after SEARCH_STEPS halvings of the bracket (2^-200 of it: below any float's resolution).
SEARCH_STEPS = 200


@functools.lru_cache(maxsize=4096)
def epsilon(sigma: float, rate: float, steps: int, delta: float) -> float:
    """The epsilon of `steps` steps of the Gaussian mechanism of noise multiplier `sigma` on a Poisson sample of
    rate `rate` (0 for no step), at `delta`; ValueError (one line) for a sigma so small the accountant's arithmetic
    fails (sigma^2 underflows) or gives no finite epsilon."""
    if steps == 0:
        return 0.0
    from opacus.accountants import RDPAccountant

    accountant = RDPAccountant()
    accountant.history = [(float(sigma), float(rate), int(steps))]
    with warnings.catch_warnings():  # "optimal order is the largest alpha": a looser bound, still a bound
        warnings.simplefilter("ignore")
        try:
            eps = float(accountant.get_epsilon(delta=delta, alphas=list(ORDERS)))
        except (ZeroDivisionError, OverflowError, FloatingPointError) as exc:
            raise ValueError(f"noise multiplier {sigma:g}: too small for the accountant ({type(exc).__name__} in its "
                             f"Renyi bound; no epsilon is computable)") from None
    if eps != eps:
        raise ValueError(f"noise multiplier {sigma:g}: the accountant gives no epsilon (NaN)")
    return eps


@functools.lru_cache(maxsize=1024)
def noise_for(target: float, delta: float, rate: float, steps: int) -> float:
    """The noise multiplier whose `steps` steps at sampling rate `rate` spend at most `target` epsilon at `delta`,
    within max(EPS_TOLERANCE, EPS_RELATIVE x target) below it: a bisection on the accountant, bounded in steps
    (the same sequence of trials as Opacus's get_noise_multiplier, which bounds only the doubling); ValueError
    (one line) when no noise up to SIGMA_MAX spends so little, or when the target is beyond what any noise the
    accountant can represent spends."""
    def reached(sigma: float) -> float:
        try:
            return epsilon(sigma, rate, steps, delta)
        except ValueError as exc:
            raise ValueError(f"--dp-epsilon {target:g}: out of reach for the accountant: {exc}") from None

    high = SIGMA_START
    eps_high = reached(high)
    while eps_high > target:
        high *= 2
        if high > SIGMA_MAX:
            raise ValueError(f"--dp-epsilon: {target} is out of reach for {steps} steps at sampling rate {rate:.4g} "
                             f"and delta {delta} (no noise multiplier up to {SIGMA_MAX:g} spends so little)")
        eps_high = reached(high)
    low, tolerance = 0.0, max(EPS_TOLERANCE, EPS_RELATIVE * target)
    for _ in range(SEARCH_STEPS):
        if target - eps_high <= tolerance:
            return high
        middle = (low + high) / 2
        eps = reached(middle)
        if eps < target:
            high, eps_high = middle, eps
        else:
            low = middle
    raise ValueError(f"--dp-epsilon {target:g}: beyond what the accountant reaches for {steps} steps at sampling "
                     f"rate {rate:.4g} (it ends at epsilon {eps_high:.4g} for noise {high:.3g}); give a smaller "
                     "target")
