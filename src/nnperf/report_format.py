"""How the report writes numbers: every number in the summary goes through these.

Readable rather than exact (three significant digits, thousands separators, SI prefixes),
because the exact values are in the tables each section names as its source. Not the place
for what the numbers mean (`nnperf.findings`).
"""

from __future__ import annotations

import math
from typing import Mapping

import pandas as pd


def missing(value) -> bool:
    if value is None or value is pd.NA:
        return True
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):
        return False


def fmt(value, unit: str = "") -> str:
    """A readable number: thousands separators above 100, three significant digits below."""
    if missing(value):
        return "n/a"
    x = float(value)
    if abs(x) >= 100:
        text = f"{x:,.0f}"
    elif abs(x) >= 10:
        text = f"{x:.1f}"
    elif abs(x) >= 1:
        text = f"{x:.2f}"
    elif x == 0:
        text = "0"
    else:
        text = f"{x:.3g}"
    return f"{text} {unit}".rstrip()


SI_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def fmt_si(value, unit: str) -> str:
    """`1.23 TFLOP/s`: a decimal SI prefix and three significant digits."""
    if missing(value):
        return "n/a"
    x = float(value)
    for scale, prefix in SI_PREFIXES:
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def fmt_pct(value) -> str:
    if missing(value):
        return "n/a"
    x = 100 * float(value)
    return f"{x:.1f}%" if abs(x) < 10 else f"{x:.0f}%"


def fmt_times(value) -> str:
    return "n/a" if missing(value) else f"{float(value):.2f}x"


def throughput_text(median, low=None, high=None) -> str:
    """`1,234 img/s (95% CI 1,200–1,260)`; the CI is left out where there is none."""
    text = fmt(median, "img/s")
    if not missing(low) and not missing(high):
        text += f" (95% CI {fmt(low)}–{fmt(high)})"
    return text


def config_text(
    row: Mapping, *, precision: bool = True, batch: bool = True, variant: bool = True
) -> str:
    """`resnet18_cifar bf16 at batch 256 (baseline)`."""
    text = str(row["model"])
    if precision:
        text += f" {row['precision']}"
    if batch:
        text += f" at batch {int(row['batch_size'])}"
    if variant:
        text += f" ({row['variant']})"
    return text


def truthy(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return (not missing(value)) and bool(value)
