"""The Notes section: the notes given to the report (config report.notes, the workflow's),
then a record (`findings.NOTE_KINDS`) per configuration not measured or flagged, per roof that
step points exceed, per profile its calibration GEMM contradicts, and per input it lacks."""

from __future__ import annotations

from typing import Iterable, Mapping

import pandas as pd

from nnperf.core.wording import missing, stop_numbers_of
from nnperf.report.bounds import ROOF_TOLERANCE, roofline_verdicts, study_readings
from nnperf.report.findings import Finding
from nnperf.report.format import GROUP_KEYS, ok_configs, sort_configs, truthy
from nnperf.report.outline import Page, Section, section
from nnperf.report.sections.roofline import roof_names

# The statuses a configuration ends with when it was not measured.
ENDED = ("oom", "over_budget", "host_busy")
COUNTED = ("oom", "over_budget", "host_busy", "unstable", "high_variance", "roof_too_low")


def status_notes(
    summary: pd.DataFrame | None, runs: pd.DataFrame | None, status: str
) -> list[Finding]:
    """Each configuration that ended with `status` (runs.csv only without a summary). An over
    budget one quotes its stop numbers or, from older results, its step time (a lower bound
    when the worker was stopped mid-step)."""
    frame = summary if summary is not None and "status" in summary.columns else runs
    if frame is None or frame.empty or "status" not in frame.columns:
        return []
    chosen = frame[frame["status"].astype(str) == status]
    found = []
    for row in sort_configs(chosen.drop_duplicates(list(GROUP_KEYS))).to_dict("records"):
        about, numbers, step = row, {}, row.get("single_step_time_s")
        if status == "oom":
            error = row.get("error") if isinstance(row.get("error"), str) else ""
            about = {**row, "error": error.strip().rstrip(".") or None}
        elif status == "over_budget":
            lower = truthy(row.get("single_step_time_is_lower_bound"))
            about = {**row, "phase": row.get("over_budget_phase"), "lower_bound": lower}
            about["step_s"] = None if missing(step) else step
            numbers = stop_numbers_of(row)
        else:
            windows = ("discarded_windows", "n_windows", "n_processes")
            numbers = {k: None if missing(row.get(k)) else row.get(k) for k in windows}
        found.append(Finding(status, about, numbers))
    return found


def unstable_notes(summary: pd.DataFrame | None) -> list[Finding]:
    if summary is None or summary.empty or "unstable" not in summary.columns:
        return []
    flagged = sort_configs(summary[summary["unstable"].map(truthy)])
    return [Finding("unstable", row) for row in flagged.to_dict("records")]


def high_cv(row: Mapping, cv_threshold: float) -> bool:
    """A throughput CV above `cv_threshold`, or flagged `high_variance`: the headline's flag."""
    cv = pd.to_numeric(row.get("throughput_img_s_cv"), errors="coerce")
    return truthy(row.get("high_variance")) or bool(cv > cv_threshold)


def variance_notes(summary: pd.DataFrame | None, cv_threshold: float) -> list[Finding]:
    ok = ok_configs(summary)
    if ok.empty or "throughput_img_s_cv" not in ok.columns:
        return []
    rows = sort_configs(ok).to_dict("records")
    threshold = {"threshold": cv_threshold}
    return [Finding("high_variance", r, threshold) for r in rows if high_cv(r, cv_threshold)]


def roof_violation_notes(verdicts: pd.DataFrame, ceilings: Iterable[Mapping] = ()) -> list[Finding]:
    """Per machine, device, roof and precision whose roof some step points exceed (the roof is
    wrong or the FLOPs overcounted: readings against it are void), with the worst."""
    if verdicts.empty:
        return []
    verdicts = verdicts.assign(roof=roof_names(verdicts, list(ceilings)))
    above = verdicts[verdicts["fraction_of_roof"] > ROOF_TOLERANCE]
    keys = ["machine", "device", "roof", "precision"]
    found = []
    for key, group in above.groupby(keys, sort=True):
        about = {**dict(zip(keys, key)), "worst": group.loc[group["fraction_of_roof"].idxmax()]}
        found.append(Finding("roof_too_low", about, {"points": len(group)}))
    return found


def profile_check_notes(profiles: pd.DataFrame | None) -> list[Finding]:
    """Per profile whose calibration GEMM is absent or contradicts its FLOPs or its roof."""
    found = []
    for row in [] if profiles is None else sort_configs(profiles).to_dict("records"):
        unchecked = missing(row.get("calibration_flops_measured"))
        kinds = {
            "profile_unchecked": unchecked,
            "flop_counters_off": not unchecked and not truthy(row.get("calibration_ok")),
            "profile_roof_flagged": not unchecked and not truthy(row.get("roof_ok")),
        }
        found += [Finding(kind, row) for kind, flagged in kinds.items() if flagged]
    return found


def records(page: Page) -> list[Finding]:
    """The section's records, ending with what the report lacks."""
    tables, summary = page.tables, page.tables.summary
    cuda_ran = any(
        frame is not None and "device" in frame and (frame["device"] == "cuda").any()
        for frame in (summary, tables.environment)
    )
    lacking = {
        "no_timed_runs": summary is None,
        "no_kernels": cuda_ran and tables.kernels is None,
        "no_roofline_points": summary is not None and tables.roofline_points is None,
        "no_ceilings": tables.roofline_points is not None and not tables.ceilings,
    }
    return [
        *(f for status in ENDED for f in status_notes(summary, tables.runs, status)),
        *unstable_notes(summary),
        *variance_notes(summary, page.cv_threshold),
        *roof_violation_notes(roofline_verdicts(study_readings(tables)), tables.ceilings),
        *profile_check_notes(tables.profiles),
        *(Finding(kind) for kind, lacks in lacking.items() if lacks),
    ]


def flag_counts(page: Page) -> Finding | None:
    """How many configurations the notes flag, by kind: the key finding this section gives."""
    kinds = [r.kind for r in records(page)]
    numbers = {kind: kinds.count(kind) for kind in COUNTED}
    return Finding("flagged_counts", {}, numbers) if any(numbers.values()) else None


def build(page: Page) -> Section:
    return section(
        "notes",
        "Notes: skipped and flagged",
        findings=[*dict.fromkeys(page.notes), *records(page)],
        sources=page.sources("runs", "summary") + list(page.tables.sources.get("notes", [])),
    )
