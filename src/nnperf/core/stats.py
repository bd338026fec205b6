"""Descriptive statistics of a set of measurements: median, quartiles, IQR, CV, variance flag,
Tukey outliers.

These describe the spread of timings (for example across the windows of one configuration)
so a reader can see how noisy a measurement was. They are not the estimate: the headline
throughput and its 95% confidence interval come from the measurement engine, which builds a
two-level t-interval over worker processes and their windows and records it in the run
document; `nnperf.report.aggregate` copies it from there and computes no interval of its own.

Quartiles use numpy's default (linear interpolation, Hyndman & Fan type 7, same as pandas).
The CV uses the sample standard deviation (ddof=1). NaN values (a failed measurement) are
left out.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from nnperf.core.contract import ReportSettings


def _clean(values: Sequence[float]) -> np.ndarray:
    data = np.asarray(values, dtype=float)
    return data[np.isfinite(data)]


def median(values: Sequence[float]) -> float:
    data = _clean(values)
    return float(np.median(data)) if data.size else math.nan


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(q1, median, q3) with linear interpolation. The middle one is `median()` itself: two
    computations of one number can differ in the last bit."""
    data = _clean(values)
    if not data.size:
        return (math.nan, math.nan, math.nan)
    q1, q3 = np.percentile(data, [25, 75])
    q2 = median(data)
    return min(float(q1), q2), q2, max(float(q3), q2)


def iqr(values: Sequence[float]) -> float:
    q1, _, q3 = quartiles(values)
    return q3 - q1


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Sample std / mean; NaN with fewer than two values."""
    data = _clean(values)
    if data.size < 2:
        return math.nan
    return float(np.std(data, ddof=1) / np.mean(data))


def is_high_variance(cv: float, threshold: float = ReportSettings.cv_threshold) -> bool:
    """True when the CV is above `threshold` (NaN, i.e. one value, is not flagged).

    Above a few percent of variation a speedup of a few percent cannot be told from noise
    by eye; the flag marks such configurations in the tables.
    """
    return bool(np.isfinite(cv) and cv > threshold)


# Tukey's fences: a value more than 1.5 IQR outside the quartiles is an outlier. pyperf's
# `stats` command counts outliers the same way ("Number of outlier (out of Q1 - 1.5*IQR ..
# Q3 + 1.5*IQR)"), so the two tools' counts can be compared.
TUKEY_K = 1.5


def tukey_fences(values: Sequence[float], k: float = TUKEY_K) -> tuple[float, float]:
    """(low, high): Q1 - k x IQR and Q3 + k x IQR, the quartiles as in `quartiles()`;
    (NaN, NaN) for no values."""
    q1, _, q3 = quartiles(values)
    spread = q3 - q1
    return q1 - k * spread, q3 + k * spread


def tukey_outliers(values: Sequence[float], k: float = TUKEY_K) -> list[int]:
    """Positions in `values` of the values outside Tukey's fences (`tukey_fences`), as
    pyperf's `stats` counts them. NaN values are never outliers; with fewer than four
    values the quartiles say too little to call anything an outlier, so none is."""
    data = np.asarray(values, dtype=float)
    if np.isfinite(data).sum() < 4:
        return []
    low, high = tukey_fences(data, k)
    return [i for i, x in enumerate(data) if np.isfinite(x) and (x < low or x > high)]


def optional_number(value) -> float | None:
    """A table or JSON cell as a float: None for a missing, boolean, unparsable or NaN one."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number
