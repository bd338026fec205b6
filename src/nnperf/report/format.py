"""How the report writes every number and configuration: numbers readable rather than exact
(the exact values are in the tables each section names as its source), configurations in
the report's order and wording."""

from __future__ import annotations

import datetime
import math
from typing import Callable, Mapping, Sequence

import pandas as pd

from nnperf.core.vocab import CONFIG_KEYS, REFERENCE_VARIANT, precision_rank
from nnperf.core.wording import count_of, missing
from nnperf.report.folders import HEADLINE


def fmt(value, unit: str = "") -> str:
    """A readable number: thousands separators above 100, three significant digits below."""
    if missing(value):
        return "n/a"
    x = float(value)
    text = f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"
    text = text if abs(x) >= 1 else "0" if x == 0 else f"{x:.3g}"
    return f"{text} {unit}".rstrip()


SI_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
# Binary prefixes, as caches and memories are sized.
BINARY_PREFIXES = ((1024**3, "Gi"), (1024**2, "Mi"), (1024, "Ki"))


def fmt_si(value, unit: str, prefixes=SI_PREFIXES) -> str:
    if missing(value):
        return "n/a"
    scale, prefix = next(((s, p) for s, p in prefixes if abs(float(value)) >= s), (1, ""))
    return f"{float(value) / scale:.3g} {prefix}{unit}"


def fmt_bytes(value) -> str:
    return fmt_si(value, "B", BINARY_PREFIXES)


def fmt_pct(value) -> str:
    if missing(value):
        return "n/a"
    x = 100 * float(value)
    return f"{x:.1f}%" if abs(x) < 10 else f"{x:.0f}%"


def fmt_ghz(hz) -> str:
    return "n/a" if missing(hz) else f"{float(hz) / 1e9:.2f} GHz"


def fmt_times(value) -> str:
    """A ratio: two decimals below 100 (1.06x), whole numbers above (129x, not 128.86x)."""
    if missing(value):
        return "n/a"
    value = float(value)
    return f"{value:.0f}x" if abs(value) >= 100 else f"{value:.2f}x"


def ci_interval(low, high, *, n_windows=None, n_processes=None, method=None) -> str:
    """`1,200–1,260`, or why not: one sample has no spread, a zero width claims a certainty no
    measurement has, and one reaching zero (old t-intervals over scattered processes) reads
    `too few clean processes`."""
    counts = {"processes": (n_processes, "process"), "windows": (n_windows, "window")}
    for count, noun in (counts.get(str(method), (n_windows, "window")), (n_windows, "window")):
        if not missing(count) and int(count) < 2:
            return f"n/a, {count_of(count, noun)}"
    if missing(low) or missing(high) or not float(low) < float(high):
        return "n/a"
    if float(low) <= 0:
        return "too few clean processes"
    return f"{fmt(low)}–{fmt(high)}"


def throughput_text(mean, low=None, high=None, *, unstable=False, **counts) -> str:
    """`1,234 img/s (95% CI 1,200–1,260; unstable)`; without a printable CI, why not."""
    if missing(mean):
        return fmt(mean, "img/s")
    notes = [f"95% CI {ci_interval(low, high, **counts)}", *(["unstable"] if unstable else [])]
    return f"{fmt(mean, 'img/s')} ({'; '.join(notes)})"


def fmt_duration(seconds) -> str:
    """`42.0 s`, `17.5 min`, `3.2 h`, `4.0 days`: a wall time in the unit a reader thinks in."""
    if missing(seconds):
        return "n/a"
    x = float(seconds)
    if abs(x) < 120:
        return fmt(x, "s")
    _, scale, unit = next(u for u in DURATIONS if abs(x) < u[0])
    return f"{x / scale:.1f} {unit}"


# (below, unit, name) of a duration past two minutes.
DURATIONS = ((2 * 3600, 60, "min"), (2 * 86400, 3600, "h"), (math.inf, 86400, "days"))


def fmt_utc(unix_seconds) -> str:
    """`2023-11-14 22:13 UTC`: a recorded Unix time, in UTC so every machine reads it alike."""
    if missing(unix_seconds):
        return "n/a"
    moment = datetime.datetime.fromtimestamp(float(unix_seconds), tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def config_text(
    row: Mapping, *, precision: bool = True, batch: bool = True, variant: bool = True
) -> str:
    """`resnet18_cifar bf16 at batch 256 (baseline)`."""
    parts = [row["model"], precision and row.get("precision")]
    parts += [batch and f"at batch {int(row['batch_size'])}", variant and f"({row.get('variant')})"]
    # A part left out is False; one shown stays even if missing (`None`).
    return " ".join(str(text) for text in parts if text is not False)


def truthy(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return (not missing(value)) and bool(value)


def cells(frame, spec: Mapping[str, tuple], first: Mapping | None = None):
    """A displayed table from {header: (column, format)} after the `first` columns as they
    are; a tuple of columns is passed in order, None passes the whole row. A missing value,
    or a column an older folder lacks, stays missing: the page shows a dash."""
    if frame is None or frame.empty:
        return pd.DataFrame()
    columns = dict(first) if first is not None else {}
    absent = pd.Series(None, index=frame.index)
    for header, (column, cell) in spec.items():
        if column is None:
            columns[header] = [cell(row) for row in frame.to_dict("records")]
        elif isinstance(column, tuple):
            columns[header] = [cell(*row) for row in zip(*(frame.get(c, absent) for c in column))]
        else:
            columns[header] = [None if missing(v) else cell(v) for v in frame.get(column, absent)]
    return pd.DataFrame(columns)


def si(unit: str) -> Callable:
    return lambda value: fmt_si(value, unit)


def scaled(factor: float) -> Callable:
    """The format of a column shown in another unit: seconds as ms is `scaled(1e3)`."""
    return lambda value: fmt(float(value) * factor)


def int_cell(value, unknown: str = "?") -> str:
    return unknown if missing(value) else str(int(value))


MS = scaled(1e3)
MIB = scaled(1 / 2**20)


def shorten(name: str, limit: int = 90) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


GROUP_KEYS = ("machine",) + CONFIG_KEYS
MEAN, CI_LOW, CI_HIGH = HEADLINE
# What a sentence quoting a throughput reads: the estimate, its CI, the windows and processes
# it rests on (one gives no CI), its method and whether it was flagged unstable.
ESTIMATE = (MEAN, CI_LOW, CI_HIGH, "n_windows", "n_processes", "ci_method", "unstable")


def ok_configs(summary: pd.DataFrame | None) -> pd.DataFrame:
    """Measured configurations (status ok, a positive mean), the ESTIMATE columns numeric
    whether or not the table had them."""
    if summary is None or summary.empty or MEAN not in summary.columns:
        return pd.DataFrame(columns=[*GROUP_KEYS, *ESTIMATE])
    frame = summary.assign(
        **{c: pd.to_numeric(summary.get(c, math.nan), errors="coerce") for c in ESTIMATE[:5]},
        ci_method=summary.get("ci_method"),
        unstable=summary["unstable"].map(truthy) if "unstable" in summary else False,
    )
    measured = frame[MEAN].notna() & (frame[MEAN] > 0)
    if "status" in frame.columns:
        measured &= frame["status"].astype(str) == "ok"
    return frame[measured]


def estimate_text(row: Mapping) -> str:
    """The throughput of `row` as a sentence quotes it."""
    counts = {key: row.get(key) for key in ("n_windows", "n_processes")}
    flags = {"method": row.get("ci_method"), "unstable": truthy(row.get("unstable"))}
    return throughput_text(*(row.get(c) for c in (MEAN, CI_LOW, CI_HIGH)), **counts, **flags)


def in_report_order(column: pd.Series) -> pd.Series:
    """Sort key: precisions in fp32/tf32/fp16/bf16 order, the reference variant first."""
    if column.name == "precision":
        return column.map(precision_rank)
    if column.name == "variant":
        return column.astype(str).map(lambda v: f"{int(v != REFERENCE_VARIANT)}{v}")
    return column


def sort_configs(frame: pd.DataFrame) -> pd.DataFrame:
    keys = [k for k in GROUP_KEYS if k in frame.columns]
    return frame.sort_values(keys, key=in_report_order, kind="stable") if keys else frame


def match_config(frame: pd.DataFrame, config: Mapping) -> Mapping | None:
    if frame is None or frame.empty:
        return None
    match = frame[(frame[list(GROUP_KEYS)] == pd.Series(config)[list(GROUP_KEYS)]).all(axis=1)]
    return None if match.empty else match.iloc[0].to_dict()


KEY_LABELS = {k: "Batch" if k == "batch_size" else k.capitalize() for k in GROUP_KEYS}


def key_columns(frame: pd.DataFrame, keys: Sequence[str] = GROUP_KEYS) -> dict[str, pd.Series]:
    return {
        KEY_LABELS[k]: frame[k].astype(str) if k != "batch_size" else frame[k].astype(int)
        for k in keys
        if k in frame.columns
    }
