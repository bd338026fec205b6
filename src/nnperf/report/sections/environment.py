"""The Environment section: the machines, one column each, and the math and pipeline settings
the runs recorded: a column for each that differs between the variants and precisions, one
finding for those every run shares (`nnperf.report.machines` builds both tables)."""

from __future__ import annotations

import pandas as pd

from nnperf.report.findings import Finding
from nnperf.report.machines import machine_table, settings_table, shared_settings
from nnperf.report.outline import Page, Section, Table, section

INTRO = (
    "Where the numbers were measured: one column per machine (host name and device "
    "name from the environment record of every run). CUDA and cuDNN are the versions "
    "that ran on a machine with GPU runs; a machine whose runs all used the CPU did not "
    "use them, and the versions its torch was built with are listed as its torch build."
)


def settings_display(table: pd.DataFrame) -> pd.DataFrame:
    """Column names as words: `cudnn_benchmark` -> `Cudnn benchmark`."""
    return table.rename(columns=lambda c: c.replace("_", " ").capitalize())


def build(page: Page) -> Section:
    environment = page.tables.environment
    shared = shared_settings(environment)
    return section(
        "environment",
        "Environment",
        intro=INTRO,
        findings=[Finding("shared_settings", shared)] if shared else [],
        tables=(
            Table("Machines", machine_table(environment)),
            Table(
                "Math and pipeline settings that differ between the variants and precisions",
                page.drop(settings_display(settings_table(environment))),
            ),
        ),
        figures=page.figures_of("environment"),
        sources=page.sources("environment"),
    )
