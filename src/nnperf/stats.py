"""Statistics across the reps of one configuration.

Reported for throughput: median, quartiles and IQR, a 95% confidence interval of the median,
and the coefficient of variation with a high-variance flag.

Choice of interval: a percentile bootstrap of the *median* (10,000 resamples, fixed seed so a
rerun of the aggregation gives the same numbers). The median is what we report because timings
on shared machines are right-skewed with occasional interference outliers; a t-interval would
be an interval for the mean under a normality assumption those timings do not meet. Caveat,
stated rather than hidden: with very few reps the bootstrap interval of the median is coarse
(for 3 reps it is [min, max], which covers the true median only 75% of the time); `n_reps`
sits next to it in every table so readers can judge.

Quartiles use numpy's default (linear interpolation, Hyndman & Fan type 7, same as pandas).
The CV uses the sample standard deviation (ddof=1).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from nnperf.contract import ReportSettings

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
# Above 5% rep-to-rep variation a speedup of a few percent cannot be told from noise.


def _clean(values: Sequence[float]) -> np.ndarray:
    data = np.asarray(values, dtype=float)
    return data[np.isfinite(data)]


def median(values: Sequence[float]) -> float:
    data = _clean(values)
    return float(np.median(data)) if data.size else math.nan


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(q1, median, q3) with linear interpolation."""
    data = _clean(values)
    if not data.size:
        return (math.nan, math.nan, math.nan)
    q1, q2, q3 = np.percentile(data, [25, 50, 75])
    return float(q1), float(q2), float(q3)


def iqr(values: Sequence[float]) -> float:
    q1, _, q3 = quartiles(values)
    return q3 - q1


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Sample std / mean; NaN with fewer than two values."""
    data = _clean(values)
    if data.size < 2:
        return math.nan
    return float(np.std(data, ddof=1) / np.mean(data))


def bootstrap_ci_median(
    values: Sequence[float],
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval of the median (seeded: reproducible)."""
    data = _clean(values)
    if not data.size:
        return (math.nan, math.nan)
    if data.size == 1:
        return (float(data[0]), float(data[0]))
    rng = np.random.default_rng(seed)
    index = rng.integers(0, data.size, size=(resamples, data.size))
    medians = np.median(data[index], axis=1)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(medians, [tail, 100.0 - tail])
    return float(low), float(high)


def ci95(values: Sequence[float]) -> tuple[float, float]:
    """The 95% interval used everywhere (tables and figure error bars)."""
    return bootstrap_ci_median(values, CONFIDENCE)


def is_high_variance(cv: float, threshold: float = ReportSettings.cv_threshold) -> bool:
    """True when the CV is above `threshold` (NaN, i.e. one rep, is not flagged)."""
    return bool(np.isfinite(cv) and cv > threshold)


def describe_reps(
    values: Sequence[float],
    cv_threshold: float = ReportSettings.cv_threshold,
    prefix: str = "throughput_img_s",
) -> dict[str, float | bool]:
    """The summary columns for one metric across reps."""
    q1, q2, q3 = quartiles(values)
    low, high = ci95(values)
    cv = coefficient_of_variation(values)
    return {
        f"{prefix}_median": q2,
        f"{prefix}_q1": q1,
        f"{prefix}_q3": q3,
        f"{prefix}_iqr": q3 - q1,
        f"{prefix}_ci95_low": low,
        f"{prefix}_ci95_high": high,
        f"{prefix}_cv": cv,
        "high_variance": is_high_variance(cv, cv_threshold),
    }
