"""A group's value over its seeds, with an interval that says what it is: the study report's tables and figures.

n values (one per finished seed) give their aggregate (the mean, or with ``aggregate="iqm"`` the interquartile
mean of Agarwal et al. 2021, "Deep RL at the edge of the statistical precipice": the mean of the middle 50%,
``scipy.stats.trim_mean(x, 0.25)``, which cuts ⌊n/4⌋ values from each end, so it is the mean below 4 values) and:

- n = 1: no interval;
- n = 2: the min–max of the two values, never a confidence interval (a 95% Student-t interval over 2 values is
  ±12.7 standard errors: wider than anything an accuracy can take);
- n >= 3, mean: the 95% Student-t interval mean ± t_{0.975,n−1}·s/√n, cut to the range the quantity can take
  (accuracies [0, 1]; analysis.labels.metric_range): the mean of a bounded quantity lies in its range, so the
  cut keeps the coverage. Not a bootstrap here: at n = 3 the 95% percentile bootstrap of the mean is exactly
  [min, max] (a resample of the lowest value three times has probability 1/27 > 2.5%), about 75% coverage for
  normal data, and it stays below 95% at a few seeds;
- n >= 3, IQM: the 95% percentile bootstrap (``scipy.stats.bootstrap``, RESAMPLES resamples of the sorted values,
  a generator seeded with BOOTSTRAP_SEED at every call: the same values give the same interval in every report);
  it lies within the values' [min, max], so within the quantity's range.

Every interval contains the aggregate. ``cell`` writes one as ``0.689 [0.61, 0.77] (min–max, n=2)``, the form
the report's Markdown table uses; table.csv has the same numbers and the interval's ``label`` in columns.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["AGGREGATES", "BOOTSTRAP_SEED", "CONFIDENCE", "Estimate", "IQM", "MEAN", "MIN_CI_SEEDS", "RESAMPLES",
           "aggregate_label", "cell", "ci_kind", "csv_cells", "csv_columns", "estimate", "iqm", "n_words", "note"]

MEAN, IQM = "mean", "iqm"
AGGREGATES = (MEAN, IQM)
#: Below this many values there is no confidence interval: the min–max (n = 2) or nothing (n = 1).
MIN_CI_SEEDS = 3
CONFIDENCE = 0.95
RESAMPLES = 9999
BOOTSTRAP_SEED = 0
#: What an interval is, as the table's cells, table.csv's ``_interval`` column and the figures' captions say it.
NO_INTERVAL, MIN_MAX, T_CI, BOOTSTRAP_CI = "none", "min–max", "t 95% CI", "bootstrap 95% CI"

Bounds = tuple[float | None, float | None]


@dataclass(frozen=True)
class Estimate:
    """The aggregate (``value``) of n values and its interval [low, high] (None for n = 1 or non-finite values);
    ``kind`` says which interval (NO_INTERVAL, MIN_MAX, T_CI, BOOTSTRAP_CI)."""

    value: float
    n: int
    low: float | None
    high: float | None
    kind: str
    aggregate: str = MEAN

    def scaled(self, factor: float) -> Estimate:
        """The same estimate in another unit (a positive factor: bytes to MiB)."""
        def times(x: float | None) -> float | None:
            return None if x is None else x * factor
        return Estimate(self.value * factor, self.n, times(self.low), times(self.high), self.kind, self.aggregate)


def iqm(values: Sequence[float]) -> float:
    """The interquartile mean: the mean after cutting ⌊n/4⌋ values from each end (scipy.stats.trim_mean 0.25)."""
    from scipy.stats import trim_mean

    return float(trim_mean(np.asarray(values, dtype=float), 0.25))


@functools.lru_cache(maxsize=4096)
def _bootstrap_iqm(ordered: tuple[float, ...]) -> tuple[float, float]:
    """The 95% percentile bootstrap interval of the IQM of sorted values, from a freshly seeded generator."""
    from scipy.stats import bootstrap, trim_mean

    settings = dict(vectorized=True, n_resamples=RESAMPLES, confidence_level=CONFIDENCE, method="percentile")
    statistic = lambda x, axis: trim_mean(x, 0.25, axis=axis)  # noqa: E731
    try:
        result = bootstrap((np.asarray(ordered),), statistic, **settings, rng=np.random.default_rng(BOOTSTRAP_SEED))
    except TypeError:  # scipy < 1.15 (pyproject allows 1.10) names the generator random_state
        result = bootstrap((np.asarray(ordered),), statistic, **settings,
                           random_state=np.random.default_rng(BOOTSTRAP_SEED))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def _t_interval(xs: np.ndarray) -> tuple[float, float]:
    """mean ± t_{(1+c)/2, n−1}·s/√n."""
    from scipy.stats import t

    mean = float(xs.mean())
    half = float(t.ppf((1 + CONFIDENCE) / 2, xs.size - 1)) * float(xs.std(ddof=1)) / math.sqrt(xs.size)
    return mean - half, mean + half


def ci_kind(aggregate: str) -> str:
    """The confidence interval of n >= MIN_CI_SEEDS values: T_CI of a mean, BOOTSTRAP_CI of an IQM."""
    return T_CI if aggregate == MEAN else BOOTSTRAP_CI


def estimate(values: Iterable[float], aggregate: str = MEAN, bounds: Bounds = (None, None)) -> Estimate | None:
    """The aggregate of the values and the interval the module's rule gives for their n, cut to ``bounds`` (the
    quantity's range); None for no values. A non-finite value leaves the aggregate as it comes out (nan, inf)
    and no interval."""
    if aggregate not in AGGREGATES:
        raise ValueError(f"aggregate {aggregate!r}: one of {', '.join(AGGREGATES)}")
    xs = np.sort(np.asarray(list(values), dtype=float))
    if xs.size == 0:
        return None
    value = iqm(xs) if aggregate == IQM and np.isfinite(xs).all() else float(xs.mean())
    if xs.size == 1 or not np.isfinite(xs).all():
        return Estimate(value, int(xs.size), None, None, NO_INTERVAL, aggregate)
    if xs.size < MIN_CI_SEEDS:
        low, high, kind = float(xs[0]), float(xs[-1]), MIN_MAX
    elif xs[0] == xs[-1]:
        low, high, kind = float(xs[0]), float(xs[0]), ci_kind(aggregate)
    elif aggregate == MEAN:
        (low, high), kind = _t_interval(xs), T_CI
    else:
        (low, high), kind = _bootstrap_iqm(tuple(float(x) for x in xs)), BOOTSTRAP_CI
    lo, hi = bounds
    low = low if lo is None else max(low, lo)
    high = high if hi is None else min(high, hi)
    # the value inside its interval whatever the rounding of the bounds' arithmetic
    return Estimate(value, int(xs.size), min(low, value), max(high, value), kind, aggregate)


def cell(est: Estimate | None) -> str:
    """A Markdown cell: ``0.689 [0.61, 0.77] (min–max, n=2)``, ``0.69 [0.66, 0.72] (t 95% CI, n=3)``,
    ``0.5 (n=1)``; – for no value."""
    if est is None:
        return "–"
    if est.low is None or est.high is None:
        return f"{est.value:.4g} (n={est.n})"
    return f"{est.value:.4g} [{est.low:.4g}, {est.high:.4g}] ({est.kind}, n={est.n})"


def csv_columns(prefix: str, aggregate: str = MEAN) -> list[str]:
    """table.csv's columns of one estimate: ``<prefix>_mean`` (``_iqm``), ``_low``, ``_high``, ``_n``,
    ``_interval``."""
    return [f"{prefix}_{col}" for col in (aggregate, "low", "high", "n", "interval")]


def csv_cells(est: Estimate | None) -> list[str]:
    """The cells of ``csv_columns``: numbers at full precision, empty where there is none."""
    def num(x: float | None) -> str:
        return "" if x is None else repr(float(x))
    if est is None:
        return ["", "", "", "", ""]
    return [num(est.value), num(est.low), num(est.high), str(est.n), est.kind]


def aggregate_label(aggregate: str) -> str:
    """How titles name the aggregate: mean or IQM."""
    return "IQM" if aggregate == IQM else "mean"


def n_words(ns: Iterable[int]) -> str:
    """'n = 3' or 'n = 2–5' (non-breaking spaces, for figure titles)."""
    found = sorted(set(ns))
    if not found:
        return "n\u00a0=\u00a00"
    return f"n\u00a0=\u00a0{found[0]}" + (f"–{found[-1]}" if found[-1] != found[0] else "")


def note(aggregate: str, seed_word: str = "seeds",
         cut: str = "cut to the range the metric can take (accuracies [0, 1])") -> str:
    """What a table's cells are, for the sentence above it; ``cut`` says where a t-interval is cut."""
    if aggregate == IQM:
        what = ("IQM (interquartile mean: the mean of the middle 50% of the values, ⌊n/4⌋ cut from each end; the "
                "mean below 4 values)")
        ci = (f"the {BOOTSTRAP_CI} of the IQM (percentile bootstrap, scipy.stats.bootstrap, {RESAMPLES} resamples, "
              f"seed {BOOTSTRAP_SEED}; within the values' min–max)")
    else:
        what = "mean"
        ci = f"the {T_CI}, mean ± t_0.975,n−1·s/√n, {cut}"
    return (f"Cells: {what} over the finished {seed_word} [low, high] (interval, n): at n ≥ {MIN_CI_SEEDS} "
            f"[low, high] is {ci}; at n = 2 it is the {MIN_MAX} of the two values (no confidence interval below "
            f"{MIN_CI_SEEDS} {seed_word}: a t-interval over 2 is ±12.7 standard errors); n = 1 has the value alone")
