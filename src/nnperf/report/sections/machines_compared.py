"""The Machines compared section: per model, the fastest and the slowest machine on the
largest configuration they share (the figure is `nnperf.report.plots.machines`').

Machines are measured apart, so each ratio between them has an unpaired interval (Fieller's,
`nnperf.report.comparisons`), and a machine is called fastest only where the tie rule
separates it from the runner-up (`comparisons.ranking`); otherwise the tie is named."""

from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from nnperf.core.vocab import REFERENCE_PRECISION, REFERENCE_VARIANT
from nnperf.report import comparisons
from nnperf.report.configurations import estimate_text, ok_configs
from nnperf.report.format import config_text
from nnperf.report.outline import Page, Section, section

INTRO = (
    "The same configurations on every machine whose results were merged; each ratio "
    "between machines carries its 95% CI (unpaired: the machines were measured apart)."
)
CONFIG = ["model", "precision", "batch_size", "variant"]


def shared_configuration(group: pd.DataFrame) -> Mapping | None:
    """The configuration of one model that most machines ran: fp32 first, then the
    baseline, then the largest batch size (None when no two machines share one)."""
    counts = group.groupby(CONFIG)["machine"].nunique()
    shared = counts[counts == counts.max()]
    if shared.max() < 2:
        return None
    candidates = pd.DataFrame(list(shared.index), columns=CONFIG)
    candidates = candidates.assign(
        _fp32=candidates["precision"] != REFERENCE_PRECISION,
        _base=candidates["variant"] != REFERENCE_VARIANT,
    )
    chosen = candidates.sort_values(["_fp32", "_base", "batch_size"], ascending=[True, True, False])
    return chosen.iloc[0][CONFIG].to_dict()


def machine_sentence(rows: pd.DataFrame, runs: pd.DataFrame | None) -> str:
    """The tie rule across machines on one configuration, with the fastest-to-slowest ratio."""
    ranked = comparisons.ranking(rows, runs)
    fast, slow = ranked.order[0], ranked.order[-1]
    if ranked.best is None:
        tied = [f"{r['machine']} at {estimate_text(r)}" for r in ranked.tied]
        return (
            f"Across machines, {config_text(fast)} has no single fastest machine: "
            f"{comparisons.names(tied, str)} are tied ({comparisons.describe(ranked.ci)})."
        )
    spread = comparisons.ratio_between(runs, fast, slow)
    text = (
        f"Across machines, {config_text(fast)} runs fastest on {fast['machine']} at "
        f"{estimate_text(fast)}, {comparisons.describe(spread)} than the slowest machine, "
        f"{slow['machine']}, at {estimate_text(slow)}"
    )
    if len(ranked.order) > 2:
        second = ranked.order[1]
        behind = comparisons.ratio_between(runs, second, fast)
        text += f"; the runner-up, {second['machine']}, is {comparisons.describe(behind)}"
    return text + "."


def machine_comparison_findings(
    ok: pd.DataFrame, machines: Sequence[str], runs: pd.DataFrame | None = None
) -> list[str]:
    """Per model, the fastest and slowest machine on the largest configuration they share,
    each ratio with its interval from the processes of `runs`."""
    if len(machines) < 2 or ok.empty:
        return []
    findings = []
    for _, group in ok.groupby("model", sort=True):
        chosen = shared_configuration(group)
        if chosen is None:
            continue
        rows = group
        for k in CONFIG:
            rows = rows[rows[k] == chosen[k]]
        findings.append(machine_sentence(rows, runs))
    return findings


def build(page: Page) -> Section | None:
    if len(page.machines) <= 1 and not page.figures_of("machines"):
        return None
    return section(
        "machines",
        "Machines compared",
        intro=INTRO,
        findings=machine_comparison_findings(
            ok_configs(page.tables.summary), page.machines, page.tables.runs
        ),
        figures=page.figures_of("machines"),
        sources=page.sources("summary", "runs", "environment"),
    )
