"""A configuration as every section reads and quotes it: the keys that name one
(`GROUP_KEYS`), its headline estimate's columns (`ESTIMATE`), the measured ones of a summary
(`ok_configs`), the report's order (`sort_configs`), how a sentence quotes its throughput
(`estimate_text`) and how a display table shows its keys (`key_columns`).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import pandas as pd

from nnperf.core.vocab import CONFIG_KEYS, REFERENCE_VARIANT, precision_rank
from nnperf.report.format import throughput_text, truthy

GROUP_KEYS = ("machine",) + CONFIG_KEYS
# The headline is the mean of the worker processes' throughputs, the number the CI is for
# (`throughput_img_s_median` is over windows: a spread statistic, not the estimate).
MEAN, CI_LOW, CI_HIGH = (
    "throughput_img_s_mean",
    "throughput_img_s_ci95_low",
    "throughput_img_s_ci95_high",
)
# What a sentence quoting a throughput reads: the estimate, its CI, the windows and processes
# it rests on (one gives no CI), its method and whether it was flagged unstable.
ESTIMATE = (MEAN, CI_LOW, CI_HIGH, "n_windows", "n_processes", "ci_method", "unstable")


def ok_configs(summary: pd.DataFrame | None) -> pd.DataFrame:
    """Measured configurations (status ok, a positive mean throughput), with the ESTIMATE
    columns numeric (`unstable` a bool) whether or not the table had them."""
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
    """The throughput of `row` as a sentence quotes it: mean, 95% CI (or why there is none)
    and the unstable flag."""
    return throughput_text(
        *(row.get(c) for c in (MEAN, CI_LOW, CI_HIGH)),
        n_windows=row.get("n_windows"),
        n_processes=row.get("n_processes"),
        method=row.get("ci_method"),
        unstable=truthy(row.get("unstable")),
    )


def in_report_order(column: pd.Series) -> pd.Series:
    """Sort key: precisions in fp32/tf32/fp16/bf16 order, the reference variant first."""
    if column.name == "precision":
        return column.map(precision_rank)
    if column.name == "variant":
        return column.astype(str).map(lambda v: f"{int(v != REFERENCE_VARIANT)}{v}")
    return column


def sort_configs(frame: pd.DataFrame) -> pd.DataFrame:
    """By machine, device, model, precision, batch and variant, in the report's order."""
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


def drop_single_machine(frame: pd.DataFrame, machines: Sequence[str]) -> pd.DataFrame:
    if len(machines) <= 1 and "Machine" in frame.columns:
        return frame.drop(columns=["Machine"])
    return frame
