"""Counts in words, alike wherever nnperf writes one: a job's log line, an over-budget verdict,
the report.

`count_of(3, "process")` is `3 processes`, `count_of(None, "window")` is `? windows`;
`missing` says which values are unknown (None, NaN, pandas' NA), for the report's numbers as
for these.
"""

from __future__ import annotations

import math

import pandas as pd


def missing(value) -> bool:
    if value is None or value is pd.NA:
        return True
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):
        return False


def count_of(value, noun: str) -> str:
    """`1 window`, `12 windows`, `3 processes`, `? windows` where unknown."""
    plural = noun + ("es" if noun.endswith("s") else "s")
    if missing(value):
        return f"? {plural}"
    n = int(value)
    return f"{n} {noun if n == 1 else plural}"
