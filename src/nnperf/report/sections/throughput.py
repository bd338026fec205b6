"""The Throughput section: how each configuration's throughput (its mean and CI are the
headline's) spreads over processes and windows, and per machine and model the range from the
slowest configuration to the fastest."""

from __future__ import annotations

import pandas as pd

from nnperf.report.configurations import MEAN, estimate_text, key_columns, ok_configs, sort_configs
from nnperf.report.format import config_text, fmt, fmt_pct, int_cell
from nnperf.report.outline import Page, Section, Table, section

INTRO = (
    "Images per second while training. Each configuration ran several worker "
    "processes, each timing several windows of steps; its throughput (At a glance) is the "
    "mean of the processes' throughputs (each its images over its windows' seconds), with a "
    "95% confidence interval (a t-interval over the process means, or over the windows of "
    "a single process; none from a single window). Below: how many processes and windows "
    "it rests on, and the median, interquartile range and coefficient of variation across "
    "all windows."
)


def spread_display(summary: pd.DataFrame | None) -> pd.DataFrame:
    ok = sort_configs(ok_configs(summary))
    if ok.empty:
        return pd.DataFrame()
    rows = ok.to_dict("records")
    return pd.DataFrame(
        {
            **key_columns(ok),
            "Processes": [int_cell(r.get("n_processes"), "—") for r in rows],
            "Windows": [int_cell(r.get("n_windows"), "—") for r in rows],
            "CI half-width": [fmt_pct(r.get("ci_half_width_rel")) for r in rows],
            "Median over windows (img/s)": [fmt(r.get("throughput_img_s_median")) for r in rows],
            "IQR (img/s)": [fmt(r.get("throughput_img_s_iqr")) for r in rows],
            "CV": [fmt_pct(r.get("throughput_img_s_cv")) for r in rows],
        }
    )


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
        tables=[Table("Spread per configuration", page.drop(spread_display(summary)))],
        figures=page.figures_of("throughput"),
        sources=page.sources("summary"),
    )
