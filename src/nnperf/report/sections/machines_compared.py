"""The Machines compared section: per model, the fastest and the slowest machine on the
largest configuration they share (the figure is `nnperf.report.plots.machines`')."""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from nnperf.core.vocab import REFERENCE_PRECISION, REFERENCE_VARIANT
from nnperf.report.configurations import MEAN, estimate_text, ok_configs
from nnperf.report.format import config_text, fmt_times
from nnperf.report.outline import Page, Section, section

INTRO = "The same configurations on every machine whose results were merged."


def machine_comparison_findings(ok: pd.DataFrame, machines: Sequence[str]) -> list[str]:
    """Per model, the fastest and slowest machine on the largest configuration they share."""
    if len(machines) < 2 or ok.empty:
        return []
    findings = []
    config = ["model", "precision", "batch_size", "variant"]
    for model, group in ok.groupby("model", sort=True):
        counts = group.groupby(config)["machine"].nunique()
        shared = counts[counts == counts.max()]
        if shared.max() < 2:
            continue
        candidates = pd.DataFrame(list(shared.index), columns=config)
        candidates = candidates.assign(
            _fp32=candidates["precision"] != REFERENCE_PRECISION,
            _base=candidates["variant"] != REFERENCE_VARIANT,
        )
        chosen = candidates.sort_values(
            ["_fp32", "_base", "batch_size"], ascending=[True, True, False]
        ).iloc[0]
        rows = group
        for k in config:
            rows = rows[rows[k] == chosen[k]]
        rows = rows.sort_values(MEAN, ascending=False)
        fast, slow = rows.iloc[0].to_dict(), rows.iloc[-1].to_dict()
        findings.append(
            f"Across machines, {config_text(fast)} runs fastest on {fast['machine']} at "
            f"{estimate_text(fast)}, {fmt_times(fast[MEAN] / slow[MEAN])} the slowest machine, "
            f"{slow['machine']}, at {estimate_text(slow)}."
        )
    return findings


def build(page: Page) -> Section | None:
    if len(page.machines) <= 1 and not page.figures_of("machines"):
        return None
    return section(
        "machines",
        "Machines compared",
        intro=INTRO,
        findings=machine_comparison_findings(ok_configs(page.tables.summary), page.machines),
        figures=page.figures_of("machines"),
        sources=page.sources("summary", "environment"),
    )
