"""A configuration as every section reads and quotes it.

The keys that name one (`GROUP_KEYS`: machine, then the run's configuration keys), the columns
of its headline estimate (`MEAN` and its 95% CI, `ESTIMATE`), the measured configurations of
a summary (`ok_configs`), the report's order (`sort_configs`), one configuration's row
(`match_config`), how a sentence quotes a throughput (`estimate_text`) and how a display
table shows the keys (`key_columns`, `drop_single_machine`). What any one section says is in
that section's module (`nnperf.report.sections`).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import pandas as pd

from nnperf.core.vocab import CONFIG_KEYS, REFERENCE_VARIANT, precision_rank
from nnperf.report.format import throughput_text, truthy

GROUP_KEYS = ("machine",) + CONFIG_KEYS


# The headline number of a configuration is the mean of its worker processes' throughputs
# (summary.csv `throughput_img_s_mean`); `throughput_img_s_median` is the median over
# windows, a spread statistic, not the estimate.
MEAN, CI_LOW, CI_HIGH = (
    "throughput_img_s_mean",
    "throughput_img_s_ci95_low",
    "throughput_img_s_ci95_high",
)


# What every sentence quoting a throughput carries: the estimate, its CI, how many windows
# it rests on (one window gives no CI) and whether the measurement was flagged unstable.
ESTIMATE = (MEAN, CI_LOW, CI_HIGH, "n_windows", "n_processes", "ci_method", "unstable")


# Prefix of the reference configuration's ESTIMATE columns in a speedup table.
REFERENCE = "reference_"


def ok_configs(summary: pd.DataFrame | None) -> pd.DataFrame:
    """Measured configurations (status ok, a positive mean throughput), with the ESTIMATE
    columns numeric (`unstable` as a bool) whether or not the table had them."""
    if summary is None or summary.empty or MEAN not in summary.columns:
        return pd.DataFrame(columns=[*GROUP_KEYS, *ESTIMATE])
    frame = summary.copy()
    for column in (MEAN, CI_LOW, CI_HIGH, "n_windows", "n_processes"):
        if column not in frame.columns:
            frame[column] = math.nan
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    if "ci_method" not in frame.columns:
        frame["ci_method"] = None
    frame["unstable"] = frame["unstable"].map(truthy) if "unstable" in frame else False
    measured = frame[MEAN].notna() & (frame[MEAN] > 0)
    if "status" in frame.columns:
        measured &= frame["status"].astype(str) == "ok"
    return frame[measured]


def estimate_text(row: Mapping, prefix: str = "") -> str:
    """The throughput of `row` as a sentence quotes it: mean, 95% CI (or why there is none)
    and the unstable flag; `prefix` REFERENCE reads the reference's columns of a speedup."""
    return throughput_text(
        row.get(prefix + MEAN),
        row.get(prefix + CI_LOW),
        row.get(prefix + CI_HIGH),
        n_windows=row.get(prefix + "n_windows"),
        n_processes=row.get(prefix + "n_processes"),
        method=row.get(prefix + "ci_method"),
        unstable=truthy(row.get(prefix + "unstable")),
    )


def sort_configs(frame: pd.DataFrame) -> pd.DataFrame:
    """Machine, device, model, then precision in fp32/tf32/fp16/bf16 order, batch, variant."""
    if frame.empty:
        return frame
    keys = [k for k in GROUP_KEYS if k in frame.columns]
    ordered = frame.assign(
        _precision=frame["precision"].map(precision_rank) if "precision" in frame else 0,
        _variant=(frame["variant"] != REFERENCE_VARIANT) if "variant" in frame else 0,
    )
    by = [k if k not in ("precision", "variant") else f"_{k}" for k in keys]
    by += [k for k in ("variant",) if k in frame.columns]
    return ordered.sort_values(by, kind="stable").drop(columns=["_precision", "_variant"])


def match_config(frame: pd.DataFrame, config: Mapping) -> Mapping | None:
    if frame is None or frame.empty:
        return None
    match = frame
    for k in GROUP_KEYS:
        match = match[match[k] == config[k]]
    return None if match.empty else match.iloc[0].to_dict()


KEY_LABELS = {
    "machine": "Machine",
    "device": "Device",
    "model": "Model",
    "precision": "Precision",
    "batch_size": "Batch",
    "variant": "Variant",
}


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
