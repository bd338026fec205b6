"""The Top kernels section: per profiled configuration the kernels that took the most time in
its step (`top_kernels`, from kernels.csv) and the time per kernel kind."""

from __future__ import annotations

import math

import pandas as pd

from nnperf.report.findings import Finding
from nnperf.report.format import GROUP_KEYS, cells, fmt, fmt_pct, key_columns, scaled, shorten, si
from nnperf.report.format import sort_configs
from nnperf.report.outline import Page, Section, Table, section

DEFAULT_TOP_KERNELS = 10
# What kernels.csv measures per launch, summed over a kernel's launches.
SUMMED = ("duration_s", "flops_total", "bytes_dram")
TOP_COLUMNS = [*GROUP_KEYS, *"rank kernel_name kind launches duration_s share flops_total".split()]
TOP_COLUMNS += ["bytes_dram", "arithmetic_intensity_dram_flop_per_byte", "performance_flop_s"]


def step_kernels(kernels: pd.DataFrame | None) -> pd.DataFrame | None:
    """kernels.csv without the calibration GEMM, its numbers as numbers (None: no kernels)."""
    if kernels is None or kernels.empty:
        return None
    step = kernels[kernels["phase"].astype(str) != "calibration"] if "phase" in kernels else kernels
    return step.assign(**{c: pd.to_numeric(step.get(c, math.nan), errors="coerce") for c in SUMMED})


def top_kernels(kernels: pd.DataFrame | None, n: int = DEFAULT_TOP_KERNELS) -> pd.DataFrame:
    """Per configuration, the `n` kernels (launches of one name summed) with the most step time."""
    step, keys = step_kernels(kernels), list(GROUP_KEYS)
    if step is None:
        return pd.DataFrame(columns=TOP_COLUMNS)
    per_name = (
        step.groupby([*keys, "kernel_name", "kind"], sort=False, dropna=False)
        .agg(launches=("duration_s", "size"), **{c: (c, "sum") for c in SUMMED})
        .reset_index()
        .sort_values([*keys, "duration_s"], ascending=[True] * len(keys) + [False], kind="stable")
    )
    per_name["rank"] = per_name.groupby(keys).cumcount() + 1
    total = per_name.groupby(keys)["duration_s"].transform("sum")
    nonzero = per_name.where(per_name != 0)
    top = per_name.assign(
        share=per_name["duration_s"] / total.where(total != 0),
        arithmetic_intensity_dram_flop_per_byte=per_name["flops_total"] / nonzero["bytes_dram"],
        performance_flop_s=per_name["flops_total"] / nonzero["duration_s"],
    )
    return top[top["rank"] <= n][TOP_COLUMNS].reset_index(drop=True)


def kernel_kind_shares(kernels: pd.DataFrame | None) -> pd.DataFrame:
    columns, step = [*GROUP_KEYS, "kind", "duration_s", "share"], step_kernels(kernels)
    if step is None:
        return pd.DataFrame(columns=columns)
    kinds = step.groupby([*GROUP_KEYS, "kind"], sort=True)["duration_s"].sum().reset_index()
    total = kinds.groupby(list(GROUP_KEYS))["duration_s"].transform("sum")
    kinds["share"] = kinds["duration_s"] / total
    return sort_configs(kinds.sort_values("share", ascending=False))[columns]


KIND_COLUMNS = {
    "Kind": ("kind", str),
    "Time (µs)": ("duration_s", scaled(1e6)),
    "Share": ("share", fmt_pct),
}
KERNEL_COLUMNS = {
    "#": ("rank", int),
    "Kernel": ("kernel_name", lambda name: shorten(str(name))),
    "Kind": ("kind", str),
    "Launches": ("launches", int),
    **{k: v for k, v in KIND_COLUMNS.items() if k != "Kind"},
    "FLOP/s": ("performance_flop_s", si("FLOP/s")),
    "Intensity, DRAM (FLOP/B)": ("arithmetic_intensity_dram_flop_per_byte", fmt),
}


def build(page: Page) -> Section:
    kernels = page.tables.kernels
    kinds = kernel_kind_shares(kernels)
    top = top_kernels(kernels, page.top_n_kernels)
    by_kind = page.drop(cells(kinds, KIND_COLUMNS, key_columns(kinds)))
    largest = kinds.groupby(list(GROUP_KEYS), sort=True).head(1)
    largest = largest.sort_values(list(GROUP_KEYS), kind="stable").to_dict("records")
    return section(
        "kernels",
        "Top kernels",
        intro=f"The {page.top_n_kernels} kernels that took the most time in the profiled step of "
        "each configuration (launches of one kernel summed), and the time per kernel kind.",
        findings=[
            Finding("kernel_kind", {k: r[k] for k in (*GROUP_KEYS, "kind")}, {"share": r["share"]})
            for r in largest
        ],
        tables=(
            Table("Top kernels by time", page.drop(cells(top, KERNEL_COLUMNS, key_columns(top)))),
            Table("Time per kernel kind", by_kind),
        ),
        figures=page.figures_of("kernels"),
        sources=page.sources("kernels"),
    )
