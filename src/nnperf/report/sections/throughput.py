"""The Throughput section: its figures and each configuration's spread over windows (mean and
CI are the headline's; processes, windows and CI half-width the measurement section's)."""

from __future__ import annotations

from nnperf.report.format import cells, fmt, fmt_pct, key_columns, ok_configs, sort_configs
from nnperf.report.outline import Page, Section, Table, section

INTRO = (
    "Images per second while training, across all timed windows of a configuration: the "
    "median, interquartile range and coefficient of variation."
)


SPREAD_COLUMNS = {
    "Median (img/s)": ("throughput_img_s_median", fmt),
    "IQR (img/s)": ("throughput_img_s_iqr", fmt),
    "CV": ("throughput_img_s_cv", fmt_pct),
}


def build(page: Page) -> Section:
    ok = sort_configs(ok_configs(page.tables.summary))
    spread = page.drop(cells(ok, SPREAD_COLUMNS, key_columns(ok)))
    return section(
        "throughput",
        "Throughput",
        intro=INTRO,
        tables=[Table("Spread over windows", spread)],
        figures=page.figures_of("throughput"),
        sources=page.sources("summary"),
    )
