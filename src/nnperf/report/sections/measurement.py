"""The Measurement cost and quality section: what measuring cost in wall time and how far
the numbers can be trusted.

Cost: the study's span, its busy time (the union of the recorded job intervals) and the
share of it in timed windows (`study_cost`, per results folder `cost_by_folder`). Quality,
per configuration (`measurement_table`): processes and windows, the CI against its target
(and, missed, the likely cause from `nnperf.report.noise`), why measurement stopped, which
level dominates the variance, fixed costs, compile times and the unstable flag.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

import pandas as pd

from nnperf.core.vocab import STOP_NUMBERS, UNSTABLE_NUMBERS
from nnperf.core.wording import count_of, missing, stop_numbers_of, unstable_text
from nnperf.report.format import GROUP_KEYS, MEAN, key_columns, sort_configs
from nnperf.report.findings import Finding
from nnperf.report.format import cells, fmt, fmt_duration, fmt_pct, fmt_utc, int_cell, truthy
from nnperf.report.noise import NOISE_COLUMNS
from nnperf.report.outline import Page, Section, Table, section

STOP_LABELS = {
    "ci_target": "CI target reached",
    "budget": "time budget (timing.max_seconds)",
    "max_processes": "process limit (timing.max_processes)",
    "target_unreachable": "target out of reach (process spread)",
}


MEASUREMENT_COLUMNS = (
    *"status n_processes n_windows ci_half_width_rel ci_target target_met".split(),
    *"throughput_img_s_min throughput_img_s_max outliers outlier_windows".split(),
    *NOISE_COLUMNS,
    "stop_reason",
    *(f"stop_{name}" for name in STOP_NUMBERS),
    *"dominant_level between_process_rsd within_process_rsd fixed_cost_s".split(),
    *"process_fixed_cost_s compile_time_s compile_time_s_later timed_window_s".split(),
    *"elapsed_s duty_cycle unstable unstable_reasons".split(),
    *(f"unstable_{name}" for name in UNSTABLE_NUMBERS),
    "flagged_windows",
    "windows_recorded",
)
NUMERIC_MEASUREMENT_COLUMNS = (
    "n_processes n_windows ci_half_width_rel ci_target throughput_img_s_min throughput_img_s_max "
    "outliers fixed_cost_s process_fixed_cost_s compile_time_s compile_time_s_later "
    "timed_window_s elapsed_s duty_cycle variance_between_processes variance_within_process"
).split()

INTRO = (
    "What measuring cost and how far the numbers can be trusted. The study's span "
    "runs from the first recorded job start to this report; busy time is the union of the "
    "recorded job intervals (timed runs, ceilings, complexity); the duty cycle is the "
    "share spent inside timed windows. Per configuration: worker processes and windows, "
    "the 95% CI half-width against its target (timing.target_ci) and, where it was "
    "missed, the likely cause; the slowest and fastest window and the windows outside "
    "Tukey's fences (1.5 IQR beyond the quartiles, as pyperf counts outliers); why measurement "
    "stopped, which level dominates the variance — between processes or between windows "
    "of one process — with both components as relative standard deviations "
    "(Kalibera & Jones), the fixed cost from the job's start to its first warm-up step "
    "(and per further process), compile time in the first and in later processes, and "
    "the unstable flag with its reasons."
)


def union_seconds(intervals: Iterable[tuple[float, float]]) -> float:
    """Seconds covered by at least one (start, end) interval: how long something ran,
    counting jobs that overlapped (a complexity job beside a timed run) once."""
    total, covered_to = 0.0, -math.inf
    for start, end in sorted(intervals):
        total += max(0.0, end - max(start, covered_to))
        covered_to = max(covered_to, end)
    return total


def target_met(row: Mapping) -> bool | None:
    """Whether the CI reached its target (`ci_target_met`; from the half-width and the
    target where the table lacks it), None where neither says."""
    value = row.get("ci_target_met")
    if not missing(value):
        return truthy(value)
    half, target = row.get("ci_half_width_rel"), row.get("ci_target")
    if missing(half) or missing(target):
        return None
    return float(half) <= float(target)


def measurement_table(
    summary: pd.DataFrame | None, windows: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per configuration (every status): how it was measured and how well (the columns
    `MEASUREMENT_COLUMNS`), with how many windows windows.csv flagged where it is given."""
    columns = [*GROUP_KEYS, *MEASUREMENT_COLUMNS]
    if summary is None or summary.empty:
        return pd.DataFrame(columns=columns)
    frame = summary.copy()
    for name in (*NUMERIC_MEASUREMENT_COLUMNS, MEAN):
        frame[name] = pd.to_numeric(frame[name], errors="coerce") if name in frame else math.nan
    frame = frame.reindex(columns=[*frame.columns, *(n for n in columns if n not in frame)])
    frame["target_met"] = pd.array([target_met(r) for r in frame.to_dict("records")], "boolean")
    # Kalibera & Jones' between-process estimate may be negative: a spread of 0.
    mean = frame[MEAN].where(frame[MEAN] > 0)
    frame["between_process_rsd"] = frame["variance_between_processes"].clip(lower=0) ** 0.5 / mean
    frame["within_process_rsd"] = frame["variance_within_process"].clip(lower=0) ** 0.5 / mean
    frame["unstable"] = frame["unstable"].map(truthy)
    if windows is not None and not windows.empty and set(GROUP_KEYS) <= set(windows.columns):
        flagged = windows.get("flagged", pd.Series(False, windows.index)).map(truthy)
        counts = flagged.groupby([windows[k] for k in GROUP_KEYS], sort=False).agg(
            flagged_windows="sum", windows_recorded="size"
        )
        frame = frame.drop(columns=list(counts.columns)).merge(
            counts.reset_index(), on=list(GROUP_KEYS), how="left"
        )
    return sort_configs(frame[columns]).reset_index(drop=True)


def ci_target_counts(table: pd.DataFrame) -> tuple[int, int]:
    """(met, judged): measured configurations that reached their CI target, of those whose
    target and CI say either way."""
    known = table[table["status"].astype(str) == "ok"]["target_met"].dropna()
    return int(known.sum()), len(known)


def machine_miss(row: Mapping) -> bool:
    """Whether a configuration missed its CI target for its machine's process spread: the
    engine stopped it early because the processes the target needs at the measured spread
    (`stop_processes_needed`) do not fit the budget or the process limit
    (`nnperf.engine.stopping.unreachable_target`). A budget that ran out first says nothing
    about the machine: a larger one may reach the target, and that miss keeps its line."""
    return str(row.get("stop_reason")) == "target_unreachable"


def paired_half_widths(comparisons: pd.DataFrame | None, machine: str) -> pd.Series:
    """Relative 95% CI half-widths of the paired comparisons made on `machine` (both sides
    there), as comparisons.csv gives them."""
    needed = {"a_machine", "b_machine", "method", "ratio", "ci95_low", "ci95_high"}
    if comparisons is None or comparisons.empty or not needed <= set(comparisons.columns):
        return pd.Series(dtype=float)
    rows = comparisons[
        (comparisons["method"].astype(str) == "paired")
        & (comparisons["a_machine"].astype(str) == machine)
        & (comparisons["b_machine"].astype(str) == machine)
    ]
    ratio, low, high = (
        pd.to_numeric(rows[c], errors="coerce") for c in ("ratio", "ci95_low", "ci95_high")
    )
    return ((high - low) / 2 / ratio.where(ratio > 0)).dropna()


def _median(values: pd.Series):
    values = pd.to_numeric(values, errors="coerce").dropna()
    return None if values.empty else float(values.median())


def machine_allows_records(
    table: pd.DataFrame, comparisons: pd.DataFrame | None = None
) -> list[Finding]:
    """Per machine where configurations missed their CI target for the machine's process
    spread (`machine_miss`): one record of what the machine allows instead of a miss per
    configuration: their spread between processes, the target it put out of reach, the
    absolute intervals they reached, and the paired comparisons' half-widths on the machine
    (which cancel what interleaved processes share)."""
    measured = table[table["status"].astype(str) == "ok"]
    found = []
    for machine, group in measured.groupby("machine", sort=True):
        missed = group[group["target_met"].fillna(True).eq(False)]
        theirs = missed[[machine_miss(row) for row in missed.to_dict("records")]]
        if theirs.empty:
            continue
        paired = paired_half_widths(comparisons, str(machine))
        half = pd.to_numeric(theirs["ci_half_width_rel"], errors="coerce").dropna()
        numbers = {
            "between_rsd": _median(theirs["between_process_rsd"]),
            "target": _median(theirs["ci_target"]),
            "missed": len(theirs),
            "judged": int(group["target_met"].notna().sum()),
            "processes_needed": _median(theirs.get("stop_processes_needed", pd.Series())),
            "half_width": None if half.empty else float(half.median()),
            "half_width_max": None if half.empty else float(half.max()),
            "paired_half_width": None if paired.empty else float(paired.median()),
            "paired": len(paired),
        }
        found.append(Finding("machine_allows", {"machine": machine}, numbers))
    return found


def quality_records(
    table: pd.DataFrame, comparisons: pd.DataFrame | None = None
) -> list[Finding]:
    """What each machine allows where its process spread put the CI target out of reach
    (`machine_allows_records`, first, standing for those configurations' misses); then how
    many reached their CI target, each other one that missed it (with why it stopped),
    and per machine which variance level dominates and the fixed and compile costs."""
    allows = machine_allows_records(table, comparisons)
    folded = {str(f.about["machine"]) for f in allows}
    met, judged = ci_target_counts(table)
    found = [Finding("ci_target_count", {}, {"met": met, "judged": judged})] if judged else []
    measured = table[table["status"].astype(str) == "ok"]
    for row in measured[measured["target_met"].fillna(True).eq(False)].to_dict("records"):
        if str(row["machine"]) in folded and machine_miss(row):
            continue
        found.append(Finding("ci_missed", {"row": row}, stop_numbers_of(row)))
    levels = measured[measured["dominant_level"].isin(["process", "window"])]
    for machine, group in levels.groupby("machine", sort=True):
        by_process = int((group["dominant_level"] == "process").sum())
        numbers = {
            "by_process": by_process,
            "by_window": len(group) - by_process,
            "between_rsd": group["between_process_rsd"].median(),
            "within_rsd": group["within_process_rsd"].median(),
        }
        found.append(Finding("dominant_level", {"machine": machine}, numbers))
    for machine, group in table.groupby("machine", sort=True):
        fixed, compiled = group["fixed_cost_s"].dropna(), group["compile_time_s"].dropna()
        if not fixed.empty:
            process = group["process_fixed_cost_s"].median()
            numbers = {"fixed_s": fixed.median(), "count": len(fixed), "process_s": process}
            found.append(Finding("fixed_cost", {"machine": machine}, numbers))
        if not compiled.empty:
            later = group.dropna(subset=["compile_time_s"])["compile_time_s_later"].median()
            numbers = {"first_s": compiled.median(), "count": len(compiled), "later_s": later}
            found.append(Finding("compile_cost", {"machine": machine}, numbers))
    return allows + found


def study_cost(
    jobs: pd.DataFrame | None, summary: pd.DataFrame | None, rendered_at_unix: float
) -> dict:
    """What the study cost in wall time: `span_s` from the first recorded job start to the
    report, `busy_s` the union of the job intervals, `timed_s` the timed windows (summary.csv
    `timed_window_s`) and their shares of both; times None where no job recorded them."""
    timed = 0.0
    if summary is not None and "timed_window_s" in summary.columns:
        timed = float(pd.to_numeric(summary["timed_window_s"], errors="coerce").fillna(0).sum())
    cost = dict.fromkeys(
        "first_start span_s busy_s timed_share_of_span timed_share_of_busy".split()
    )
    cost.update(jobs=0, rendered_at=rendered_at_unix, timed_s=timed)
    if jobs is None or jobs.empty:
        return cost
    starts, ends = jobs["started_at_unix"].astype(float), jobs["ended_at_unix"].astype(float)
    span, busy = rendered_at_unix - starts.min(), union_seconds(zip(starts, ends))
    cost.update(
        jobs=len(jobs),
        first_start=starts.min(),
        span_s=span,
        busy_s=busy,
        timed_share_of_span=timed / span if span > 0 else None,
        timed_share_of_busy=timed / busy if busy > 0 else None,
    )
    return cost


def cost_records(cost: Mapping) -> list[Finding]:
    if cost["first_start"] is None:
        return [Finding("study_span_unknown", {}, cost)]
    return [Finding("study_span", {}, cost), Finding("duty_cycle", {}, cost)]


# How the wall-time table names each kind of job (singular, plural), in this order.
JOB_LABELS = {
    "run": ("timed run", "timed runs"),
    "ceilings": ("ceilings job", "ceilings jobs"),
    "complexity": ("complexity job", "complexity jobs"),
}


def cost_by_folder(jobs: pd.DataFrame | None, summary: pd.DataFrame | None) -> pd.DataFrame:
    """Per results folder (one run of the study on one machine): its machines, the jobs that
    recorded when they ran, first start, last end, busy time and timed-window seconds."""
    columns = "results_dir machines jobs first_start last_end busy_s timed_s".split()
    if jobs is None or jobs.empty:
        return pd.DataFrame(columns=[*columns, "timed_share_of_busy"])
    rows = []
    for folder, group in jobs.groupby("results_dir", sort=False):
        mine = pd.DataFrame(columns=["machine", "timed_window_s"])
        if summary is not None and "results_dir" in summary.columns:
            mine = summary[summary["results_dir"] == folder]
        kinds = group["kind"].value_counts()
        ordered = [k for k in JOB_LABELS if k in kinds.index]
        ordered += sorted(k for k in kinds.index if k not in JOB_LABELS)
        labels = [JOB_LABELS.get(k, (k, k))[int(kinds[k] != 1)] for k in ordered]
        rows.append(
            {
                "results_dir": folder,
                "machines": ", ".join(sorted(mine.get("machine", pd.Series()).dropna().unique())),
                "jobs": ", ".join(f"{kinds[k]} {label}" for k, label in zip(ordered, labels)),
                "first_start": float(group["started_at_unix"].min()),
                "last_end": float(group["ended_at_unix"].max()),
                "busy_s": union_seconds(zip(group["started_at_unix"], group["ended_at_unix"])),
                "timed_s": (
                    pd.to_numeric(mine.get("timed_window_s"), errors="coerce").sum()
                    if "timed_window_s" in mine
                    else math.nan
                ),
            }
        )
    frame = pd.DataFrame(rows, columns=columns)
    return frame.assign(
        timed_share_of_busy=frame["timed_s"] / frame["busy_s"].where(lambda b: b > 0)
    )


def half_width_cell(row) -> str:
    if not missing(row["ci_half_width_rel"]) and float(row["ci_half_width_rel"]) > 0:
        return fmt_pct(row["ci_half_width_rel"])
    if str(row["status"]) == "ok" and not missing(row["n_windows"]) and int(row["n_windows"]) < 2:
        return f"n/a, {count_of(row['n_windows'], 'window')}"
    return "n/a"


def outliers_cell(count, which) -> str:
    """`2: p1w3, p2w0`: how many windows lie outside Tukey's fences, and which."""
    which = f": {which}" if count and isinstance(which, str) and which else ""
    return "" if missing(count) else f"{int(count)}{which}"


def unstable_cell(row) -> str:
    reasons = unstable_text(row) if row["unstable"] else ""
    return f"yes: {reasons}" if reasons else "yes" if row["unstable"] else ""


MEASUREMENT_CELLS = {
    "Status": ("status", lambda v: str(v).replace("_", " ")),
    "Processes": ("n_processes", int_cell),
    "Windows": ("n_windows", int_cell),
    "CI half-width": (None, half_width_cell),
    "Target": ("ci_target", fmt_pct),
    "Met": (
        None,
        lambda r: "n/a" if missing(r["target_met"]) else "yes" if r["target_met"] else "no",
    ),
    "Min–max (img/s)": (
        ("throughput_img_s_min", "throughput_img_s_max"),
        lambda low, high: "" if missing(low) or missing(high) else f"{fmt(low)}–{fmt(high)}",
    ),
    "Outliers": (("outliers", "outlier_windows"), outliers_cell),
    "Stopped on": ("stop_reason", lambda reason: STOP_LABELS.get(reason, "")),
    "Dominant level": ("dominant_level", str),
    "Between-process RSD": ("between_process_rsd", fmt_pct),
    "Within-process RSD": ("within_process_rsd", fmt_pct),
    "Fixed cost (s)": ("fixed_cost_s", fmt),
    "Per-process fixed cost (s)": ("process_fixed_cost_s", fmt),
    # `20.0 / 2.00`; empty for a variant that does not compile.
    "Compile, first / later processes (s)": (
        ("compile_time_s", "compile_time_s_later"),
        lambda first, later: "" if missing(first) else f"{fmt(first)} / {fmt(later)}",
    ),
    "Timed (s)": ("timed_window_s", fmt),
    "Elapsed (s)": ("elapsed_s", fmt),
    "Duty cycle": ("duty_cycle", fmt_pct),
    # No windows.csv (older results): unknown, shown as a dash.
    "Flagged windows": (
        ("flagged_windows", "windows_recorded"),
        lambda n, of: None if missing(of) else f"{int(n)}/{int(of)}",
    ),
    "Unstable": (None, unstable_cell),
}
COST_CELLS = {
    "Results folder": ("results_dir", str),
    "Machines": ("machines", str),
    "Jobs recorded": ("jobs", str),
    "First start": ("first_start", fmt_utc),
    "Last end": ("last_end", fmt_utc),
    "Busy (union of jobs)": ("busy_s", fmt_duration),
    "Timed windows": ("timed_s", fmt_duration),
    "Timed share of busy": ("timed_share_of_busy", fmt_pct),
}


def measurement_display(table: pd.DataFrame) -> pd.DataFrame:
    return cells(table, MEASUREMENT_CELLS, key_columns(table))


def page_measurement(page: Page) -> pd.DataFrame:
    return measurement_table(page.tables.summary, page.tables.windows)


def page_cost(page: Page) -> dict:
    """`study_cost` of the page's jobs, up to when the report is written."""
    return study_cost(page.tables.jobs, page.tables.summary, page.rendered_at)


def cost_record(page: Page) -> Finding | None:
    """What measuring cost and how many reached their CI target: the key finding this
    section gives (None before any job was recorded)."""
    cost = page_cost(page)
    if cost["first_start"] is None:
        return None
    met, judged = ci_target_counts(page_measurement(page))
    numbers = {k: cost[k] for k in ("busy_s", "timed_share_of_busy")}
    return Finding("measuring_cost", {}, {**numbers, "met": met, "judged": judged})


def build(page: Page) -> Section:
    measurement = page_measurement(page)
    folders = cost_by_folder(page.tables.jobs, page.tables.summary)
    costs = page.tables.summary is not None or page.tables.jobs is not None
    quality = quality_records(measurement, page.tables.comparisons)
    # What the machine allows comes first, said once, above the cost and the counts.
    allows = [f for f in quality if f.kind == "machine_allows"]
    quality = [f for f in quality if f.kind != "machine_allows"]
    return section(
        "measurement",
        "Measurement cost and quality",
        intro=INTRO,
        findings=allows + (cost_records(page_cost(page)) if costs else []) + quality,
        tables=(
            Table("Measurement per configuration", page.drop(measurement_display(measurement))),
            Table("Wall time per results folder", cells(folders, COST_CELLS)),
        ),
        sources=page.sources("summary", "windows", "jobs"),
    )
