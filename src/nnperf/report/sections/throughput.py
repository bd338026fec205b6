"""The Throughput section: images per second of every configuration with its 95% CI, its
spread over windows and the flags a reader must know before trusting it, and per machine and
model the range from the slowest configuration to the fastest."""

from __future__ import annotations

import pandas as pd

from nnperf.core.wording import missing
from nnperf.report.configurations import (
    CI_HIGH,
    CI_LOW,
    MEAN,
    estimate_text,
    key_columns,
    ok_configs,
    sort_configs,
)
from nnperf.report.format import ci_interval, config_text, fmt, fmt_pct, int_cell, truthy
from nnperf.report.outline import Page, Section, Table, section
from nnperf.report.sections.measurement import target_met

INTRO = (
    "Images per second while training. Each configuration ran several worker "
    "processes, each timing several windows of steps; its throughput is the mean of the "
    "processes' throughputs (each its images over its windows' seconds), with a 95% "
    "confidence interval (a t-interval over the process means, or over the windows of "
    "a single process; none from a single window). The median, interquartile range and "
    "coefficient of variation are across all windows. Flags: unstable (windows disturbed, "
    "see Notes), high variance (CV above the threshold), CI target missed."
)


def throughput_display(summary: pd.DataFrame | None, cv_threshold: float) -> pd.DataFrame:
    if summary is None or summary.empty:
        return pd.DataFrame()
    s = sort_configs(summary)
    rows = s.to_dict("records")
    return pd.DataFrame(
        {
            **key_columns(s),
            "Status": [str(r.get("status", "ok")).replace("_", " ") for r in rows],
            "Processes": [int_cell(r.get("n_processes"), "—") for r in rows],
            "Windows": [int_cell(r.get("n_windows"), "—") for r in rows],
            "Mean (img/s)": [fmt(r.get(MEAN)) for r in rows],
            "95% CI (img/s)": [ci_cell(r) for r in rows],
            "CI half-width": [fmt_pct(r.get("ci_half_width_rel")) for r in rows],
            "Median over windows (img/s)": [fmt(r.get("throughput_img_s_median")) for r in rows],
            "IQR (img/s)": [fmt(r.get("throughput_img_s_iqr")) for r in rows],
            "CV": [fmt_pct(r.get("throughput_img_s_cv")) for r in rows],
            "Flag": [quality_flags(r, cv_threshold) for r in rows],
        }
    )


def ci_cell(row) -> str:
    """The CI as `low–high`; for a measured configuration without one, why (`ci_interval`:
    `n/a, 1 window`)."""
    if str(row.get("status", "ok")) != "ok" or missing(row.get(MEAN)):
        return "n/a"
    interval, why = ci_interval(
        row.get(CI_LOW),
        row.get(CI_HIGH),
        n_windows=row.get("n_windows"),
        n_processes=row.get("n_processes"),
        method=row.get("ci_method"),
    )
    return interval or why


def quality_flags(row, cv_threshold: float) -> str:
    """What a reader must know before trusting a measured number: unstable windows, a CV
    above the threshold, a CI wider than its target."""
    if str(row.get("status", "ok")) != "ok":
        return ""
    flags = []
    if truthy(row.get("unstable")):
        flags.append("unstable")
    cv = row.get("throughput_img_s_cv")
    if truthy(row.get("high_variance")) or (not missing(cv) and float(cv) > cv_threshold):
        flags.append("high variance")
    if target_met(row) is False:
        flags.append("CI target missed")
    return ", ".join(flags)


def throughput_findings(summary: pd.DataFrame | None) -> list[str]:
    """Per machine and model: from the slowest configuration to the fastest."""
    findings = []
    for (machine, model), group in ok_configs(summary).groupby(["machine", "model"], sort=True):
        best = group.loc[group[MEAN].idxmax()].to_dict()
        worst = group.loc[group[MEAN].idxmin()].to_dict()
        findings.append(
            f"{model} on {machine}: from {estimate_text(worst)} for {config_text(worst)} to "
            f"{estimate_text(best)} for {config_text(best)}."
        )
    return findings


def build(page: Page) -> Section:
    summary = page.tables.summary
    return section(
        "throughput",
        "Throughput",
        intro=INTRO,
        findings=throughput_findings(summary),
        tables=[
            Table(
                "Throughput per configuration",
                page.drop(throughput_display(summary, page.cv_threshold)),
            )
        ],
        figures=page.figures_of("throughput"),
        sources=page.sources("summary"),
    )
