"""The Notes section: what was skipped and what was flagged.

One note per configuration that ran out of memory, ran over its time budget, was flagged
unstable or for high variance; per roof that step points exceed; per profile whose
calibration GEMM contradicts it; and what the report lacks (no timed runs, no kernels, no
roofline points, no ceilings). The notes given to the report come first (`collect`).
"""

from __future__ import annotations

from typing import Iterable, Mapping

import pandas as pd

from nnperf.core.wording import count_of, missing, stop_numbers_of, stop_sentence, unstable_text
from nnperf.report.bounds import ROOF_TOLERANCE, roofline_verdicts, study_readings
from nnperf.report.configurations import GROUP_KEYS, ok_configs, sort_configs
from nnperf.report.format import (
    config_text,
    fmt,
    fmt_ghz,
    fmt_pct,
    fmt_si,
    fmt_times,
    truthy,
)
from nnperf.report.findings import Finding
from nnperf.report.outline import Page, Section, section
from nnperf.report.wording.noise import CAUSE_LABELS
from nnperf.report.sections.roofline import profiled_configs, roof_names
from nnperf.ncu.ranges import CALIBRATION_TOLERANCE
from nnperf.roofline import points


def configs_with_status(
    summary: pd.DataFrame | None, runs: pd.DataFrame | None, status: str
) -> pd.DataFrame:
    """One row per configuration whose measurement ended with `status` (summary.csv; from
    runs.csv, one row per process, only when there is no summary)."""
    frame = summary if summary is not None and "status" in summary.columns else runs
    if frame is None or frame.empty or "status" not in frame.columns:
        return pd.DataFrame(columns=[*GROUP_KEYS, "status"])
    chosen = frame[frame["status"].astype(str) == status]
    return sort_configs(chosen.drop_duplicates(list(GROUP_KEYS)))


def _error(row: Mapping) -> str | None:
    error = row.get("error")
    return error.strip().rstrip(".") if isinstance(error, str) and error.strip() else None


def oom_notes(summary: pd.DataFrame | None, runs: pd.DataFrame | None = None) -> list[str]:
    """One note per configuration that ran out of memory, with the error it raised."""
    notes = []
    for row in configs_with_status(summary, runs, "oom").to_dict("records"):
        text = f"Out of memory: {config_text(row)} on {row['machine']}"
        if _error(row):
            text += f": {_error(row)}"
        notes.append(text + ".")
    return notes


def over_budget_notes(summary: pd.DataFrame | None, runs: pd.DataFrame | None = None) -> list[str]:
    """One note per configuration whose step was too slow for its warm-up and minimal timed
    windows to fit in `timing.max_seconds`: it has no throughput, only the step time the
    runner measured (`single_step_time_s`; a lower bound when the worker was stopped
    mid-step, `single_step_time_is_lower_bound`)."""
    notes = []
    for row in configs_with_status(summary, runs, "over_budget").to_dict("records"):
        text = f"Over budget: {config_text(row)} on {row['machine']} was not measured"
        step, numbers = row.get("single_step_time_s"), stop_numbers_of(row)
        if numbers:
            text += " — " + stop_sentence("over_budget", numbers, row.get("over_budget_phase"))
        elif not missing(step):
            at_least = "at least " if truthy(row.get("single_step_time_is_lower_bound")) else ""
            text += f" — one training step takes {at_least}{fmt(step, 's')}"
        notes.append(text + "; raise timing.max_seconds to measure it.")
    return notes


def unstable_notes(summary: pd.DataFrame | None) -> list[str]:
    """One note per configuration flagged unstable (summary.csv `unstable`), with the
    reasons the runner gave (`unstable_reasons` codes and `unstable_<name>` numbers, worded
    by `unstable_sentences`): windows disturbed by other processes, throttled clocks, a
    further process stopped or out of memory."""
    if summary is None or summary.empty or "unstable" not in summary.columns:
        return []
    flagged = sort_configs(summary[summary["unstable"].map(truthy)])
    notes = []
    for row in flagged.to_dict("records"):
        reasons = unstable_text(row) or "no reason recorded"
        notes.append(
            f"Unstable: {config_text(row)} on {row['machine']} — {reasons}; its throughput is "
            "marked unstable wherever it is quoted, and comparisons with it need care."
        )
    return notes


def roof_violation_notes(verdicts: pd.DataFrame, ceilings: Iterable[Mapping] = ()) -> list[str]:
    """One note per machine, device, roof origin and precision whose roof some step points
    exceed: such a roof is wrong for the device (a benchmark that ran badly, a datasheet
    entry for another model) or the FLOPs are overcounted, and every reading against it is
    void. The worst point is quoted; a CPU's derived peak is named derived (`roof_names`)."""
    if verdicts.empty:
        return []
    verdicts = verdicts.assign(roof=roof_names(verdicts, list(ceilings)))
    above = verdicts[verdicts["fraction_of_roof"] > ROOF_TOLERANCE]
    notes = []
    keys = ["machine", "device", "roof", "precision"]
    for key, group in above.groupby(keys, sort=True):
        worst = group.loc[group["fraction_of_roof"].idxmax()]
        row = dict(zip(keys, key))
        notes.append(
            f"Roof too low: {len(group)} {row['precision']} step point"
            f"{'s lie' if len(group) != 1 else ' lies'} above the {row['roof']} roofs on "
            f"{row['machine']} "
            f"(worst: {config_text(worst)} at {fmt_si(worst['performance_flop_s'], 'FLOP/s')}, "
            f"{fmt_times(worst['fraction_of_roof'])} the {fmt_si(worst['attainable_flop_s'], 'FLOP/s')} "
            f"roof); check the {row['roof']} {row['precision']} ceiling of {row['device']}."
        )
    return notes


def variance_notes(summary: pd.DataFrame | None, cv_threshold: float) -> list[str]:
    """Configurations whose throughput varies across windows more than `cv_threshold` (CV),
    with the likely cause where summary.csv names one (`noise_cause`)."""
    ok = ok_configs(summary)
    if ok.empty or "throughput_img_s_cv" not in ok.columns:
        return []
    cv = pd.to_numeric(ok["throughput_img_s_cv"], errors="coerce")
    flagged = cv > cv_threshold
    if "high_variance" in ok.columns:
        flagged = flagged | ok["high_variance"].map(truthy)
    notes = []
    for row in sort_configs(ok[flagged]).to_dict("records"):
        windows = count_of(row.get("n_windows"), "window")
        processes = count_of(row.get("n_processes"), "process")
        cause = CAUSE_LABELS.get(row.get("noise_cause"))
        notes.append(
            f"High variance: {config_text(row)} on {row['machine']} — throughput CV "
            f"{fmt_pct(row['throughput_img_s_cv'])} across {windows} of {processes} "
            f"(threshold {fmt_pct(cv_threshold)})"
            + (f", likely cause: {cause} (see Measurement)" if cause else "")
            + "; treat its numbers and speedups with care."
        )
    return notes


def flag_counts(page: Page) -> Finding | None:
    """How many configurations the notes flag, by kind, and how many roofs lie too low: the
    key finding this section gives (None where it flags nothing)."""
    tables = page.tables
    summary = tables.summary
    numbers = {
        "oom": len(oom_notes(summary, tables.runs)),
        "over_budget": len(over_budget_notes(summary, tables.runs)),
        "unstable": len(unstable_notes(summary)),
        "high_variance": len(variance_notes(summary, page.cv_threshold)),
        "roofs_too_low": len(
            roof_violation_notes(roofline_verdicts(study_readings(tables)), tables.ceilings)
        ),
    }
    return Finding("flagged_counts", {}, numbers) if any(numbers.values()) else None


def profile_check_notes(profiles: pd.DataFrame | None) -> list[str]:
    """One note per profile whose calibration GEMM contradicts its FLOP counters or its
    compute roof: such a profile's FLOPs or roof are wrong for this GPU."""
    if profiles is None or profiles.empty:
        return []
    low, high = points.CALIBRATION_ROOF_RANGE
    notes = []
    for row in sort_configs(profiles).to_dict("records"):
        where = f"{config_text(row)} on {row['machine']}"
        if missing(row.get("calibration_flops_measured")):
            notes.append(
                f"Profile unchecked: {where} — its export holds no calibration GEMM, so neither "
                "its FLOP counters nor its roof could be checked; profile again with `nnperf step`."
            )
            continue
        if not truthy(row.get("calibration_ok")):
            notes.append(
                f"FLOP counters off: {where} — the calibration GEMM counted "
                f"{fmt_times(row['calibration_ratio'])} its known FLOPs (allowed: within "
                f"{fmt_pct(CALIBRATION_TOLERANCE)}); the profile's FLOPs and "
                "every point made from them are suspect."
            )
        if not truthy(row.get("roof_ok")):
            notes.append(
                f"Profile roof flagged: {where} — its calibration GEMM reached "
                f"{fmt_pct(row['calibration_roof_fraction'])} of the profile's "
                f"{row['precision']} compute roof ({fmt_si(row['calibration_roof_flop_s'], 'FLOP/s')}"
                f" at {fmt_ghz(row['calibration_clock_hz'])}; allowed {fmt_pct(low)}–"
                f"{fmt_pct(high)}), so that roof ({row['roof_basis']}) is wrong for this GPU and "
                "no bound is read from it; the measured and datasheet roofs still apply."
            )
    return notes


def sort_notes(notes: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(notes))


def missing_input_notes(page: Page) -> list[str]:
    """What the report lacks: timed runs, a kernel table where CUDA ran, roofline points,
    the ceilings to read them against."""
    tables = page.tables
    summary = tables.summary
    notes = []
    if summary is None:
        notes.append(
            "No timed runs: results/tables/summary.csv was not part of this report, so "
            "there are no throughput, speedup or breakdown numbers."
        )
    cuda_ran = any(
        frame is not None and "device" in frame and (frame["device"] == "cuda").any()
        for frame in (summary, tables.environment)
    )
    if cuda_ran and tables.kernels is None:
        notes.append(
            "No per-kernel table (kernels.csv) although CUDA runs were timed: Nsight "
            "Compute (ncu) was not part of this run, so CUDA rooflines are analytic."
        )
    if summary is not None and tables.roofline_points is None:
        notes.append("No roofline points (roofline_points.csv) were part of this report.")
    if tables.roofline_points is not None and not tables.ceilings:
        notes.append(
            "No ceilings JSON: there are no measured or datasheet roofs to read the "
            "roofline points against."
        )
    return notes


def collect(page: Page) -> list[str]:
    """Every note of the report, each once: the given ones, then the report's own."""
    tables = page.tables
    summary = tables.summary
    notes = list(page.notes)
    notes += oom_notes(summary, tables.runs)
    notes += over_budget_notes(summary, tables.runs)
    notes += unstable_notes(summary)
    notes += variance_notes(summary, page.cv_threshold)
    notes += roof_violation_notes(roofline_verdicts(study_readings(tables)), tables.ceilings)
    notes += profile_check_notes(profiled_configs(tables.profiles))
    return sort_notes(notes + missing_input_notes(page))


def build(page: Page) -> Section:
    return section(
        "notes",
        "Notes: skipped and flagged",
        findings=collect(page),
        sources=page.sources("runs", "summary") + list(page.tables.sources.get("notes", [])),
    )
