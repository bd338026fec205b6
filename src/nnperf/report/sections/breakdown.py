"""The Time breakdown section: each phase's median time as a share of their sum (`phase_shares`),
the largest phase per machine, the input-bound configurations; and what limits a configuration
(`limit_record`, its phases beside its roofline verdict), the key finding on the fastest."""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from nnperf.core.vocab import PHASES
from nnperf.report.bounds import LEVEL_LABELS, ROOF_TOLERANCE, preferred_verdict
from nnperf.report.format import GROUP_KEYS, key_columns, match_config, ok_configs, sort_configs
from nnperf.report.findings import Finding
from nnperf.report.format import MS, cells, fmt_pct
from nnperf.report.input_verdict import INPUT_BOUND_SHARE
from nnperf.report.outline import Page, Section, Table, section
from nnperf.report.wording.templates import PHASE_LABELS

# Below this fraction of the attainable roof a step is far from both roofs: its time goes
# to launch latency, small kernels and framework overhead rather than to arithmetic or
# memory traffic (the usual reading of a roofline; Williams et al., CACM 2009).
FAR_FROM_ROOF = 0.3

INTRO = (
    "Where a training step's time goes: the median time of each phase (data wait, "
    "host-to-device copy, forward, backward, optimizer) as a share of their sum."
)

SECONDS, SHARES = [f"{p}_s" for p in PHASES], [f"{p}_share" for p in PHASES]
SHARE_COLUMNS = [*GROUP_KEYS, *SECONDS, "phase_total_s", *SHARES, "input_share"]


def phase_shares(summary: pd.DataFrame | None) -> pd.DataFrame:
    """Per measured configuration: each phase's median time (over every timed step of every
    process) and its share of their sum; `input_share` (data wait + host-to-device) is the
    input pipeline's."""
    source = ok_configs(summary)
    medians = [f"{p}_s_median" for p in PHASES]
    if source.empty or not set(medians) & set(source.columns):
        return pd.DataFrame(columns=SHARE_COLUMNS)
    seconds = source.reindex(columns=medians, fill_value=0.0).apply(pd.to_numeric, errors="coerce")
    seconds.columns = SECONDS
    total = seconds.fillna(0.0).sum(axis=1)
    shares = seconds.fillna(0.0).div(total, axis=0).set_axis(SHARES, axis=1)
    parts = [source[list(GROUP_KEYS)], seconds, total.rename("phase_total_s"), shares]
    frame = pd.concat(parts, axis=1)
    frame["input_share"] = frame["data_wait_share"] + frame["h2d_share"]
    return sort_configs(frame[frame["phase_total_s"] > 0][SHARE_COLUMNS]).reset_index(drop=True)


def largest_phase(row: Mapping) -> tuple[str, float]:
    phase = max(PHASES, key=lambda p: float(row[f"{p}_share"]))
    return phase, float(row[f"{phase}_share"])


def breakdown_records(phases: pd.DataFrame, listed: int = 5) -> list[Finding]:
    """Per machine: which phase is largest how often, and every input-bound configuration
    (up to `listed`, then a count), rather than one finding per row of the table."""
    records = []
    for machine, group in phases.groupby("machine", sort=True):
        largest = [largest_phase(r)[0] for r in group.to_dict("records")]
        counts = pd.Series(largest).value_counts()
        top = counts.index[0]
        example = group.iloc[largest.index(top)].to_dict()
        numbers = {"count": int(counts.iloc[0]), "total": len(group)}
        numbers["share"] = example[f"{top}_share"]
        records.append(Finding("largest_phase", {**_keys(example), "phase": top}, numbers))
        bound = group[group["input_share"] >= INPUT_BOUND_SHARE]
        waiting = bound.sort_values("input_share", ascending=False).head(listed)
        for row in waiting.to_dict("records"):
            numbers = {k: row[k] for k in ("input_share", "data_wait_share", "h2d_share")}
            records.append(Finding("waits_on_input", _keys(row), numbers))
        if len(bound) > listed:
            more = {"count": len(bound) - listed}
            records.append(Finding("more_waiting", {"machine": machine}, more))
    return records


def _keys(row: Mapping) -> dict:
    return {k: row[k] for k in GROUP_KEYS if k in row}


def limit_record(config: Mapping, phases: pd.DataFrame, verdicts: pd.DataFrame) -> Finding | None:
    """What limits `config`, from its phase shares and roofline verdict: the input pipeline,
    overheads far below the roofs, compute, memory, or only its largest phase."""
    phase_row = match_config(phases, config)
    verdict = preferred_verdict(verdicts, config)
    about, numbers = _keys(config), {}
    if phase_row is not None:
        about["phase"], numbers["phase_share"] = largest_phase(phase_row)
        numbers.update(input_share=phase_row["input_share"], step_s=phase_row["phase_total_s"])
        if phase_row["input_share"] >= INPUT_BOUND_SHARE:
            return Finding("limit_input", about, numbers)
    if verdict is not None:
        about.update(roof=verdict["roof"], bound=verdict["bound"])
        about["level"] = LEVEL_LABELS.get(verdict["limit"], verdict["limit"])
        read = ("fraction_of_roof", "fraction_of_peak", "performance_flop_s", "attainable_flop_s")
        numbers.update({name: float(verdict[name]) for name in read})
        if verdict["fraction_of_roof"] <= ROOF_TOLERANCE:
            if verdict["fraction_of_roof"] < FAR_FROM_ROOF:
                return Finding("limit_overheads", about, numbers)
            kind = "limit_compute" if verdict["bound"] == "compute" else "limit_memory"
            return Finding(kind, about, numbers)
    return None if phase_row is None else Finding("limit_unread", about, numbers)


PHASE_COLUMNS = {
    "Step (ms, sum of phase medians)": ("phase_total_s", MS),
    **{PHASE_LABELS[p].capitalize(): (f"{p}_share", fmt_pct) for p in PHASES},
}


def build(page: Page) -> Section:
    phases = phase_shares(page.tables.summary)
    shares = page.drop(cells(phases, PHASE_COLUMNS, key_columns(phases)))
    return section(
        "breakdown",
        "Time breakdown",
        intro=INTRO,
        findings=breakdown_records(phases),
        tables=[Table("Phase shares", shares)],
        figures=page.figures_of("breakdown"),
        sources=page.sources("summary"),
    )
