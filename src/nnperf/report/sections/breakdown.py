"""The Time breakdown section: each phase's median time (data wait, host-to-device copy,
forward, backward, optimizer) as a share of their sum (`phase_shares`), the largest phase per
machine and the input-bound configurations."""

from __future__ import annotations

from typing import Iterable, Mapping

import pandas as pd

from nnperf.core.vocab import PHASES
from nnperf.report.configurations import GROUP_KEYS, key_columns, ok_configs, sort_configs
from nnperf.report.format import MS, cells, config_text, fmt_pct
from nnperf.report.outline import Page, Section, Table, section

PHASE_LABELS = {
    "data_wait": "data wait",
    "h2d": "host-to-device",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer",
}


# A configuration whose step waits on input (data wait + host-to-device) for a quarter of
# its time or more is input-bound: no faster kernel can win more than that share back
# before the input pipeline is fixed, so the report says so before anything else.
INPUT_BOUND_SHARE = 0.25


INTRO = (
    "Where a training step's time goes: the median time of each phase (data wait, "
    "host-to-device copy, forward, backward, optimizer) as a share of their sum."
)


def phase_columns(columns: Iterable[str]) -> dict[str, str]:
    """The column holding each phase's median step time (summary.csv: `<phase>_s_median`)."""
    present = set(columns)
    found = {}
    for phase in PHASES:
        for candidate in (f"{phase}_s_median", f"phase_time_s_{phase}", f"{phase}_s"):
            if candidate in present:
                found[phase] = candidate
                break
    return found


def phase_shares(summary: pd.DataFrame | None) -> pd.DataFrame:
    """Per measured configuration: each phase's median time (summary.csv `<phase>_s_median`,
    over every timed step of every process) and its share of the summed phases.

    `input_share` is data wait + host-to-device: the input pipeline.
    """
    source = ok_configs(summary)
    found = phase_columns(source.columns)
    columns = [
        *GROUP_KEYS,
        *(f"{p}_s" for p in PHASES),
        "phase_total_s",
        *(f"{p}_share" for p in PHASES),
        "input_share",
    ]
    if not found or source.empty:
        return pd.DataFrame(columns=columns)
    frame = source[list(GROUP_KEYS)].copy()
    for phase in PHASES:
        frame[f"{phase}_s"] = (
            pd.to_numeric(source[found[phase]], errors="coerce") if phase in found else 0.0
        )
    seconds = frame[[f"{p}_s" for p in PHASES]].fillna(0.0)
    frame["phase_total_s"] = seconds.sum(axis=1)
    for phase in PHASES:
        frame[f"{phase}_share"] = seconds[f"{phase}_s"] / frame["phase_total_s"]
    frame["input_share"] = frame["data_wait_share"] + frame["h2d_share"]
    frame = frame[frame["phase_total_s"] > 0]
    return sort_configs(frame[columns]).reset_index(drop=True)


def breakdown_findings(phases: pd.DataFrame, listed: int = 5) -> list[str]:
    """Per machine: which phase is largest how often, and every input-bound configuration
    (up to `listed`, then a count), rather than one sentence per row of the table."""
    findings = []
    for machine, group in phases.groupby("machine", sort=True):
        largest = [largest_phase(r)[0] for r in group.to_dict("records")]
        counts = pd.Series(largest).value_counts()
        top = counts.index[0]
        example = group.iloc[largest.index(top)].to_dict()
        findings.append(
            f"On {machine}, {PHASE_LABELS[top]} is the largest phase in {counts.iloc[0]} of "
            f"{len(group)} configurations (e.g. {fmt_pct(example[f'{top}_share'])} of the step for "
            f"{config_text(example)})."
        )
        bound = group[group["input_share"] >= INPUT_BOUND_SHARE].sort_values(
            "input_share", ascending=False
        )
        for row in bound.head(listed).to_dict("records"):
            findings.append(
                f"{config_text(row)} on {machine} waits on input for "
                f"{fmt_pct(row['input_share'])} of each step (data wait "
                f"{fmt_pct(row['data_wait_share'])}, host-to-device {fmt_pct(row['h2d_share'])})."
            )
        if len(bound) > listed:
            findings.append(
                f"… and {len(bound) - listed} more input-bound configurations on "
                f"{machine} (see the table)."
            )
    return findings


def largest_phase(row: Mapping) -> tuple[str, float]:
    phase = max(PHASES, key=lambda p: float(row[f"{p}_share"]))
    return phase, float(row[f"{phase}_share"])


PHASE_COLUMNS = {
    "Step (ms, sum of phase medians)": ("phase_total_s", MS),
    **{PHASE_LABELS[p].capitalize(): (f"{p}_share", fmt_pct) for p in PHASES},
}


def build(page: Page) -> Section:
    phases = phase_shares(page.tables.summary)
    return section(
        "breakdown",
        "Time breakdown",
        intro=INTRO,
        findings=breakdown_findings(phases),
        tables=[
            Table("Phase shares", page.drop(cells(phases, PHASE_COLUMNS, key_columns(phases))))
        ],
        figures=page.figures_of("breakdown"),
        sources=page.sources("summary"),
    )
