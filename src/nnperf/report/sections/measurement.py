"""The Measurement cost and quality section: what measuring cost in wall time (`study_cost`,
per results folder `cost_by_folder`) and how far the numbers can be trusted, per configuration
(`measurement_table`; a missed CI target's likely cause from `nnperf.report.noise`)."""

from __future__ import annotations

import math
from typing import Mapping

import pandas as pd

from nnperf.core.wording import count_of, missing, stop_numbers_of, unstable_text
from nnperf.report.findings import Finding
from nnperf.report.format import GROUP_KEYS, MEAN, cells, fmt, fmt_duration, fmt_pct, fmt_utc
from nnperf.report.format import int_cell, key_columns, sort_configs, truthy
from nnperf.report.outline import Page, Section, Table, section
from nnperf.torchprof.analysis import union_length

# Why measurement stopped, as the table says it (`nnperf.engine.stopping`).
STOP_LABELS = {
    "ci_target": "CI target reached",
    "budget": "time budget (timing.max_seconds)",
    "max_processes": "process limit (timing.max_processes)",
    "target_unreachable": "target out of reach (process spread)",
}
# What the section reads of summary.csv, numbers after `MEASUREMENT_COLUMNS[7]`: a column an
# older summary lacks is added empty (the page shows a dash).
MEASUREMENT_COLUMNS = (
    "status ci_target_met dominant_level stop_reason unstable unstable_reasons outlier_windows "
    "n_processes n_windows ci_half_width_rel ci_target throughput_img_s_min throughput_img_s_max "
    "outliers fixed_cost_s process_fixed_cost_s compile_time_s compile_time_s_later "
    "timed_window_s elapsed_s duty_cycle variance_between_processes variance_within_process "
    "flagged_windows windows_recorded"
).split()
# The stop reason of a missed target the machine is to blame for: the processes the target
# needs at the machine's spread do not fit (`nnperf.engine.stopping.unreachable_target`). A
# budget that ran out first says nothing about the machine, and that miss keeps its own line.
MACHINE_MISS = "target_unreachable"
# How the wall-time table names each kind of job, in this order.
JOB_NOUNS = {"run": "timed run", "ceilings": "ceilings job", "complexity": "complexity job"}
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


def target_met(row: Mapping) -> bool | None:
    """`ci_target_met`, or from the half-width where the table lacks it; None where neither says."""
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
    """Per configuration (every status): how it was measured and how well."""
    if summary is None or summary.empty:
        return pd.DataFrame(columns=[*GROUP_KEYS, *MEASUREMENT_COLUMNS, "target_met"])
    added = [c for c in MEASUREMENT_COLUMNS if c not in summary]
    frame = summary.reindex(columns=[*summary, *added])
    numeric = [*MEASUREMENT_COLUMNS[7:], MEAN]
    frame[numeric] = frame.reindex(columns=numeric).apply(pd.to_numeric, errors="coerce")
    frame = frame.copy()  # one block per dtype again: pandas warns on columns added to a split one
    frame["target_met"] = pd.array([target_met(r) for r in frame.to_dict("records")], "boolean")
    # Kalibera & Jones' between-process estimate may be negative: a spread of 0.
    mean = frame[MEAN].where(frame[MEAN] > 0)
    frame["between_process_rsd"] = frame["variance_between_processes"].clip(lower=0) ** 0.5 / mean
    frame["within_process_rsd"] = frame["variance_within_process"].clip(lower=0) ** 0.5 / mean
    frame["unstable"] = frame["unstable"].map(truthy)
    if windows is not None and not windows.empty and set(GROUP_KEYS) <= set(windows.columns):
        flagged = windows.get("flagged", pd.Series(False, windows.index)).map(truthy)
        by = [windows[k] for k in GROUP_KEYS]
        counts = flagged.groupby(by, sort=False).agg(flagged_windows="sum", windows_recorded="size")
        frame = frame.drop(columns=list(counts.columns))
        frame = frame.merge(counts.reset_index(), on=list(GROUP_KEYS), how="left")
    return sort_configs(frame).reset_index(drop=True)


def ci_target_counts(table: pd.DataFrame) -> tuple[int, int]:
    """(met, judged): measured configurations that reached their CI target, of those judged."""
    known = table[table["status"].astype(str) == "ok"]["target_met"].dropna()
    return int(known.sum()), len(known)


def _median(values: pd.Series, how: str = "median"):
    values = pd.to_numeric(values, errors="coerce").dropna()
    return None if values.empty else float(values.agg(how))


def quality_records(table: pd.DataFrame, comparisons: pd.DataFrame | None = None) -> list[Finding]:
    """Per machine with `MACHINE_MISS`es, one record in their place: the spread, the target it
    put out of reach, the intervals reached, absolute and paired (which cancel what interleaved
    processes share). Then the CI target counts, every other miss, and per machine the dominant
    variance level and the fixed and compile costs."""
    needed = ["a_machine", "b_machine", "method", "ratio", "ci95_low", "ci95_high"]
    if comparisons is None or not set(needed) <= set(comparisons.columns):
        comparisons = pd.DataFrame(columns=needed)
    ratio, low, high = (pd.to_numeric(comparisons[c], errors="coerce") for c in needed[3:])
    half_widths = (high - low) / 2 / ratio.where(ratio > 0)
    measured = table[table["status"].astype(str) == "ok"]
    missed = measured[measured["target_met"].fillna(True).eq(False)]
    by_machine = missed["stop_reason"].astype(str) == MACHINE_MISS
    allows = []
    for machine, theirs in missed[by_machine].groupby("machine", sort=True):
        group = measured[measured["machine"] == machine]
        on = [str(machine), str(machine), "paired"]
        paired = half_widths[(comparisons[needed[:3]].astype(str) == on).all(axis=1)].dropna()
        numbers = {
            "between_rsd": _median(theirs["between_process_rsd"]),
            "target": _median(theirs["ci_target"]),
            "missed": len(theirs),
            "judged": int(group["target_met"].notna().sum()),
            "processes_needed": _median(theirs.get("stop_processes_needed", pd.Series())),
            "half_width": _median(theirs["ci_half_width_rel"]),
            "half_width_max": _median(theirs["ci_half_width_rel"], "max"),
            "paired_half_width": _median(paired),
            "paired": len(paired),
        }
        allows.append(Finding("machine_allows", {"machine": machine}, numbers))
    met, judged = ci_target_counts(table)
    found = [Finding("ci_target_count", {}, {"met": met, "judged": judged})] if judged else []
    # Every machine with a miss of its own has its record above, standing for those misses.
    for row in missed[~by_machine].to_dict("records"):
        found.append(Finding("ci_missed", {"row": row}, stop_numbers_of(row)))
    levels = measured[measured["dominant_level"].isin(["process", "window"])]
    for machine, group in levels.groupby("machine", sort=True):
        by_process = int((group["dominant_level"] == "process").sum())
        numbers = {"by_process": by_process, "by_window": len(group) - by_process}
        numbers["between_rsd"] = group["between_process_rsd"].median()
        numbers["within_rsd"] = group["within_process_rsd"].median()
        found.append(Finding("dominant_level", {"machine": machine}, numbers))
    for machine, group in table.groupby("machine", sort=True):
        fixed, compiled = group["fixed_cost_s"].dropna(), group.dropna(subset=["compile_time_s"])
        first, later = compiled["compile_time_s"], compiled["compile_time_s_later"].median()
        process = group["process_fixed_cost_s"].median()
        costs = {
            "fixed_cost": {"fixed_s": fixed.median(), "count": len(fixed), "process_s": process},
            "compile_cost": {"first_s": first.median(), "count": len(first), "later_s": later},
        }
        found += [Finding(k, {"machine": machine}, n) for k, n in costs.items() if n["count"]]
    return allows + found


def study_cost(
    jobs: pd.DataFrame | None, summary: pd.DataFrame | None, rendered_at_unix: float
) -> dict:
    """`span_s` from the first recorded job start to the report, `busy_s` the union of the job
    intervals, `timed_s` the timed windows and their shares of both (None: no job recorded)."""
    windows = None if summary is None else summary.get("timed_window_s")
    timed = 0.0 if windows is None else float(pd.to_numeric(windows, errors="coerce").sum())
    cost = {"jobs": 0, "rendered_at": rendered_at_unix, "timed_s": timed, "first_start": None}
    cost |= dict.fromkeys(("span_s", "busy_s", "timed_share_of_span", "timed_share_of_busy"))
    if jobs is None or jobs.empty:
        return cost
    starts, ends = jobs["started_at_unix"].astype(float), jobs["ended_at_unix"].astype(float)
    span, busy = rendered_at_unix - starts.min(), union_length(zip(starts, ends))
    cost.update(jobs=len(jobs), first_start=starts.min(), span_s=span, busy_s=busy)
    cost.update(timed_share_of_span=timed / span if span > 0 else None)
    return cost | {"timed_share_of_busy": timed / busy if busy > 0 else None}


def cost_records(cost: Mapping) -> list[Finding]:
    if cost["first_start"] is None:
        return [Finding("study_span_unknown", {}, cost)]
    return [Finding("study_span", {}, cost), Finding("duty_cycle", {}, cost)]


def cost_by_folder(jobs: pd.DataFrame | None, summary: pd.DataFrame | None) -> pd.DataFrame:
    """Per results folder (one run of the study on one machine): what its recorded jobs cost."""
    columns = "results_dir machines jobs first_start last_end busy_s timed_s".split()
    if jobs is None or jobs.empty:
        return pd.DataFrame(columns=[*columns, "timed_share_of_busy"])
    if summary is None or "results_dir" not in summary.columns:
        summary = pd.DataFrame(columns=["results_dir", "machine", "timed_window_s"])
    rows = []
    for folder, group in jobs.groupby("results_dir", sort=False):
        mine = summary[summary["results_dir"] == folder]
        kinds = group["kind"].value_counts()
        ordered = [k for k in JOB_NOUNS if k in kinds] + sorted(set(kinds.index) - set(JOB_NOUNS))
        timed = mine.get("timed_window_s")
        timed = math.nan if timed is None else pd.to_numeric(timed, errors="coerce").sum()
        machines = ", ".join(sorted(mine.get("machine", pd.Series()).dropna().unique()))
        counted = ", ".join(count_of(kinds[k], JOB_NOUNS.get(k, k)) for k in ordered)
        started, ended = group["started_at_unix"], group["ended_at_unix"]
        span = float(started.min()), float(ended.max()), union_length(zip(started, ended))
        rows.append((folder, machines, counted, *span, timed))
    frame = pd.DataFrame(rows, columns=columns)
    frame["timed_share_of_busy"] = frame["timed_s"] / frame["busy_s"].where(frame["busy_s"] > 0)
    return frame


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
    "Met": (("target_met",), lambda met: "n/a" if missing(met) else "yes" if met else "no"),
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


def cost_record(page: Page) -> Finding | None:
    """The key finding this section gives: what measuring cost, how many met their CI target."""
    cost = study_cost(page.tables.jobs, page.tables.summary, page.rendered_at)
    if cost["first_start"] is None:
        return None
    met, judged = ci_target_counts(measurement_table(page.tables.summary, page.tables.windows))
    numbers = {k: cost[k] for k in ("busy_s", "timed_share_of_busy")}
    return Finding("measuring_cost", {}, {**numbers, "met": met, "judged": judged})


def build(page: Page) -> Section:
    tables = page.tables
    measurement = measurement_table(tables.summary, tables.windows)
    folders = cost_by_folder(tables.jobs, tables.summary)
    cost = study_cost(tables.jobs, tables.summary, page.rendered_at)
    costs = cost_records(cost) if tables.summary is not None or tables.jobs is not None else []
    quality = quality_records(measurement, tables.comparisons)
    # What the machine allows comes first, said once, above the cost and the counts.
    findings = sorted(costs + quality, key=lambda f: f.kind != "machine_allows")
    return section(
        "measurement",
        "Measurement cost and quality",
        intro=INTRO,
        findings=findings,
        tables=(
            Table("Measurement per configuration", page.drop(measurement_display(measurement))),
            Table("Wall time per results folder", cells(folders, COST_CELLS)),
        ),
        sources=page.sources("summary", "windows", "jobs"),
    )
