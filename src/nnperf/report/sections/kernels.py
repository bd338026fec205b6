"""The Top kernels section: per profiled configuration the kernels that took the most time
in its step (`top_kernels`, from kernels.csv) and the time per kernel kind."""

from __future__ import annotations

import math

import pandas as pd

from nnperf.report.configurations import GROUP_KEYS, key_columns, sort_configs
from nnperf.report.format import cells, config_text, fmt, fmt_pct, scaled, shorten, si
from nnperf.report.outline import Page, Section, Table, section

DEFAULT_TOP_KERNELS = 10


def top_kernels(kernels: pd.DataFrame | None, n: int = DEFAULT_TOP_KERNELS) -> pd.DataFrame:
    """Per configuration, the `n` kernels (by name) that took the most time in the step.

    Launches of one kernel name are summed; `share` is of the profiled step's kernel time
    (the calibration GEMM is left out).
    """
    columns = [
        *GROUP_KEYS,
        "rank",
        "kernel_name",
        "kind",
        "launches",
        "duration_s",
        "share",
        "flops_total",
        "bytes_dram",
        "arithmetic_intensity_dram_flop_per_byte",
        "performance_flop_s",
    ]
    if kernels is None or kernels.empty:
        return pd.DataFrame(columns=columns)
    step = kernels[kernels["phase"].astype(str) != "calibration"] if "phase" in kernels else kernels
    step = step.assign(
        **{
            c: pd.to_numeric(step[c], errors="coerce") if c in step else math.nan
            for c in ("duration_s", "flops_total", "bytes_dram")
        }
    )
    rows = []
    for key, group in step.groupby(list(GROUP_KEYS), sort=True):
        total = group["duration_s"].sum()
        per_name = (
            group.groupby(["kernel_name", "kind"], sort=False, dropna=False)
            .agg(
                launches=("duration_s", "size"),
                duration_s=("duration_s", "sum"),
                flops_total=("flops_total", "sum"),
                bytes_dram=("bytes_dram", "sum"),
            )
            .reset_index()
            .sort_values("duration_s", ascending=False)
            .head(n)
        )
        for rank, k in enumerate(per_name.to_dict("records"), start=1):
            rows.append(
                {
                    **dict(zip(GROUP_KEYS, key)),
                    "rank": rank,
                    **k,
                    "share": k["duration_s"] / total if total else math.nan,
                    "arithmetic_intensity_dram_flop_per_byte": (
                        k["flops_total"] / k["bytes_dram"] if k["bytes_dram"] else math.nan
                    ),
                    "performance_flop_s": (
                        k["flops_total"] / k["duration_s"] if k["duration_s"] else math.nan
                    ),
                }
            )
    return pd.DataFrame(rows, columns=columns)


def kernel_kind_shares(kernels: pd.DataFrame | None) -> pd.DataFrame:
    """Per configuration and kernel kind: summed duration and share of the step."""
    columns = [*GROUP_KEYS, "kind", "duration_s", "share"]
    if kernels is None or kernels.empty:
        return pd.DataFrame(columns=columns)
    step = kernels[kernels["phase"].astype(str) != "calibration"] if "phase" in kernels else kernels
    step = step.assign(duration_s=pd.to_numeric(step["duration_s"], errors="coerce"))
    kinds = step.groupby([*GROUP_KEYS, "kind"], sort=True)["duration_s"].sum().reset_index()
    totals = kinds.groupby(list(GROUP_KEYS))["duration_s"].transform("sum")
    kinds["share"] = kinds["duration_s"] / totals
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


def kind_findings(kinds: pd.DataFrame) -> list[str]:
    """Per configuration, the kernel kind that takes the largest share of its step."""
    findings = []
    for key, group in kinds.groupby(list(GROUP_KEYS), sort=True):
        first = group.iloc[0].to_dict()
        findings.append(
            f"{config_text(first)} on {first['machine']}: {first['kind']} "
            f"kernels take {fmt_pct(first['share'])} of the profiled step."
        )
    return findings


def build(page: Page) -> Section:
    kernels = page.tables.kernels
    kinds = kernel_kind_shares(kernels)
    top = top_kernels(kernels, page.top_n_kernels)
    return section(
        "kernels",
        "Top kernels",
        intro=f"The {page.top_n_kernels} kernels that took the most time in the profiled step of "
        "each configuration (launches of one kernel summed), and the time per kernel kind.",
        findings=kind_findings(kinds),
        tables=(
            Table("Top kernels by time", page.drop(cells(top, KERNEL_COLUMNS, key_columns(top)))),
            Table(
                "Time per kernel kind", page.drop(cells(kinds, KIND_COLUMNS, key_columns(kinds)))
            ),
        ),
        figures=page.figures_of("kernels"),
        sources=page.sources("kernels"),
    )
