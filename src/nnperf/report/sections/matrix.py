"""The Study matrix section: every configuration of the study per batch size, with its
status and how many worker processes and timed windows measured it."""

from __future__ import annotations

import pandas as pd

from nnperf.report.configurations import GROUP_KEYS, sort_configs
from nnperf.report.format import int_cell
from nnperf.report.outline import Page, Section, Table, section

INTRO = (
    "Every configuration of the study, per batch size: its status and, when "
    "measured, how many worker processes (p) and timed windows (w) measured it. "
    "oom: out of memory; over budget: one step too slow to measure within "
    "timing.max_seconds."
)


def matrix_cell(row) -> str:
    """`ok 3p/12w` (worker processes / timed windows), or the status that stopped it."""
    status = str(row.get("status", "ok"))
    if status != "ok":
        return status.replace("_", " ")
    return f"ok {int_cell(row.get('n_processes'))}p/{int_cell(row.get('n_windows'))}w"


def matrix_display(summary: pd.DataFrame | None) -> pd.DataFrame:
    """The study matrix: one row per (machine, device, model, precision, variant), one
    column per batch size, each cell the status with how many worker processes and timed
    windows measured it."""
    if summary is None or summary.empty:
        return pd.DataFrame()
    s = summary.copy()
    s["cell"] = [matrix_cell(r) for r in s.to_dict("records")]
    keys = [k for k in GROUP_KEYS if k != "batch_size"]
    wide = s.pivot_table(
        index=keys, columns="batch_size", values="cell", aggfunc="first"
    ).reset_index()
    wide = sort_configs(wide.assign(batch_size=0)).drop(columns=["batch_size"])
    wide.columns = [
        f"bs {c}" if isinstance(c, (int, float)) and not isinstance(c, bool) else c
        for c in wide.columns
    ]
    renamed = {
        "machine": "Machine",
        "device": "Device",
        "model": "Model",
        "precision": "Precision",
        "variant": "Variant",
    }
    return wide.rename(columns=renamed).fillna("—")


def build(page: Page) -> Section:
    return section(
        "matrix",
        "Study matrix",
        intro=INTRO,
        tables=[Table("Configurations", page.drop(matrix_display(page.tables.summary)))],
        sources=page.sources("summary"),
    )
