"""The Measurement cost and quality section: what measuring cost in wall time and how far
the numbers can be trusted.

Cost: the study's span, its busy time (the union of the recorded job intervals,
`ResultSet.jobs`) and the share of it in timed windows (`study_cost`, per results folder
`cost_by_folder`). Quality, per configuration (`measurement_table`): worker processes and
windows, the CI half-width against its target (and, missed, the likely cause from
`nnperf.report.noise`), min, max and outlying windows, why measurement stopped, which level
dominates the variance, fixed costs, compile times and the unstable flag.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

import pandas as pd

from nnperf.core.vocab import STOP_NUMBERS, UNSTABLE_NUMBERS
from nnperf.core.wording import count_of, missing, stop_numbers_of, stop_sentence, unstable_text
from nnperf.report.findings import Finding
from nnperf.report.configurations import GROUP_KEYS, MEAN, key_columns, sort_configs
from nnperf.report.format import (
    config_text,
    fmt,
    fmt_duration,
    fmt_pct,
    fmt_utc,
    int_cell,
    truthy,
)
from nnperf.report.noise import NOISE_COLUMNS
from nnperf.report.outline import Page, Section, Table, section
from nnperf.report.wording.findings import missed_target
from nnperf.report.wording.noise import noise_text

STOP_LABELS = {
    "ci_target": "CI target reached",
    "budget": "time budget (timing.max_seconds)",
    "max_processes": "process limit (timing.max_processes)",
    "target_unreachable": "target out of reach (process spread)",
}


MEASUREMENT_COLUMNS = (
    "status",
    "n_processes",
    "n_windows",
    "ci_half_width_rel",
    "ci_target",
    "target_met",
    "throughput_img_s_min",
    "throughput_img_s_max",
    "outliers",
    "outlier_windows",
    *NOISE_COLUMNS,
    "stop_reason",
    *(f"stop_{name}" for name in STOP_NUMBERS),
    "dominant_level",
    "between_process_rsd",
    "within_process_rsd",
    "fixed_cost_s",
    "process_fixed_cost_s",
    "compile_time_s",
    "compile_time_s_later",
    "timed_window_s",
    "elapsed_s",
    "duty_cycle",
    "unstable",
    "unstable_reasons",
    *(f"unstable_{name}" for name in UNSTABLE_NUMBERS),
    "flagged_windows",
    "windows_recorded",
)


NUMERIC_MEASUREMENT_COLUMNS = (
    "n_processes",
    "n_windows",
    "ci_half_width_rel",
    "ci_target",
    "throughput_img_s_min",
    "throughput_img_s_max",
    "outliers",
    "fixed_cost_s",
    "process_fixed_cost_s",
    "compile_time_s",
    "compile_time_s_later",
    "timed_window_s",
    "elapsed_s",
    "duty_cycle",
)


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
    total, covered_to = 0.0, None
    for start, end in sorted(intervals):
        if covered_to is None or start > covered_to:
            total += end - start
            covered_to = end
        elif end > covered_to:
            total += end - covered_to
            covered_to = end
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


def _rsd(variance, mean) -> float:
    """A variance component in (img/s)^2 as a standard deviation relative to the mean (a
    negative between-process estimate, possible with Kalibera & Jones' formula, is 0)."""
    if missing(variance) or missing(mean) or float(mean) <= 0:
        return math.nan
    return math.sqrt(max(float(variance), 0.0)) / float(mean)


def measurement_table(
    summary: pd.DataFrame | None, windows: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per configuration (every status): how it was measured and how well.

    Processes and windows, the CI half-width against its target, why measurement stopped,
    which level dominates the variance and the two components as relative standard
    deviations (`between_process_rsd`, `within_process_rsd`), the fixed costs, compile time
    of the first and the later processes, timed seconds, elapsed seconds and duty cycle, the
    unstable flag with its reasons and, from windows.csv when given, how many windows were
    flagged.
    """
    columns = [*GROUP_KEYS, *MEASUREMENT_COLUMNS]
    if summary is None or summary.empty:
        return pd.DataFrame(columns=columns)
    frame = summary.copy()
    for name in (*NUMERIC_MEASUREMENT_COLUMNS, MEAN):
        frame[name] = pd.to_numeric(frame[name], errors="coerce") if name in frame else math.nan
    # Computed columns among them are filled below.
    absent = [n for n in MEASUREMENT_COLUMNS if n not in frame]
    frame = frame.reindex(columns=[*frame.columns, *absent])
    rows = frame.to_dict("records")
    frame["target_met"] = pd.array([target_met(r) for r in rows], dtype="boolean")
    frame["between_process_rsd"] = [
        _rsd(r.get("variance_between_processes"), r[MEAN]) for r in rows
    ]
    frame["within_process_rsd"] = [_rsd(r.get("variance_within_process"), r[MEAN]) for r in rows]
    frame["unstable"] = [truthy(r.get("unstable")) for r in rows]
    frame["flagged_windows"] = math.nan
    frame["windows_recorded"] = math.nan
    if windows is not None and not windows.empty and set(GROUP_KEYS) <= set(windows.columns):
        counted = windows.assign(
            _flagged=windows["flagged"].map(truthy) if "flagged" in windows else False
        )
        counts = (
            counted.groupby(list(GROUP_KEYS), sort=False)
            .agg(_flagged=("_flagged", "sum"), _recorded=("_flagged", "size"))
            .reset_index()
        )
        frame = frame.merge(counts, on=list(GROUP_KEYS), how="left")
        frame["flagged_windows"] = frame["_flagged"]
        frame["windows_recorded"] = frame["_recorded"]
    return sort_configs(frame[columns]).reset_index(drop=True)


def ci_target_counts(table: pd.DataFrame) -> tuple[int, int]:
    """(met, judged): measured configurations that reached their CI target, of those whose
    target and CI say either way."""
    measured = table[table["status"].astype(str) == "ok"]
    known = measured["target_met"].dropna()
    return int(known.sum()), len(known)


def ci_target_sentence(table: pd.DataFrame) -> str | None:
    """How many measured configurations reached their CI target."""
    met, judged = ci_target_counts(table)
    if not judged:
        return None
    text = (
        f"{met} of {judged} measured configuration{'s' if judged != 1 else ''} reached "
        f"{'their' if judged != 1 else 'its'} CI target (a 95% CI half-width of throughput "
        "within timing.target_ci of the estimate)"
    )
    if met < judged:
        text += f"; {judged - met} did not"
    return text + "."


def ci_missed_sentences(table: pd.DataFrame) -> list[str]:
    """One sentence per measured configuration whose CI is wider than its target, and why
    measurement stopped before reaching it (the budget, the process limit)."""
    measured = table[table["status"].astype(str) == "ok"]
    missed = measured[measured["target_met"].fillna(True).eq(False)]
    sentences = []
    for row in missed.to_dict("records"):
        shape = (
            f"{count_of(row['n_processes'], 'process')} and {count_of(row['n_windows'], 'window')}"
        )
        named = f"{config_text(row)} on {row['machine']}"
        if missing(row["ci_half_width_rel"]):
            width = f"{named} missed its CI target: no CI could be made from {shape}"
        else:
            width = missed_target([{**row, "ci_target_met": False}], lambda c: named)
            width += f" after {shape}"
        why = stop_sentence(row.get("stop_reason"), stop_numbers_of(row))
        why = why or "no stop reason was recorded"
        sentences.append(
            f"{width}; {why}." + (f" Likely cause: {noise_text(row)}" if noise_text(row) else "")
        )
    return sentences


def dominant_level_sentences(table: pd.DataFrame) -> list[str]:
    """Per machine: which level of the measurement — between worker processes or between
    windows of one process — contributes more variance, and so what narrows the CI."""
    measured = table[
        (table["status"].astype(str) == "ok") & table["dominant_level"].isin(["process", "window"])
    ]
    sentences = []
    for machine, group in measured.groupby("machine", sort=True):
        by_process = int((group["dominant_level"] == "process").sum())
        by_window = len(group) - by_process
        if by_window == 0 or by_process == 0:
            level = "processes" if by_window == 0 else "windows of one process"
            counts = f"the spread between {level} dominates in all {len(group)} configurations"
        else:
            counts = (
                f"the spread between processes dominates in {by_process} of {len(group)} "
                f"configurations and the spread between windows of one process in {by_window}"
            )
        text = (
            f"On {machine}, {counts} (median relative standard deviations: "
            f"{fmt_pct(group['between_process_rsd'].median())} between processes, "
            f"{fmt_pct(group['within_process_rsd'].median())} within one)"
        )
        if by_process > by_window:
            text += (
                "; where processes dominate, more processes narrow the CI, more windows per "
                "process do not (Kalibera & Jones)"
            )
        sentences.append(text + ".")
    return sentences


def fixed_cost_sentences(table: pd.DataFrame) -> list[str]:
    """Per machine: the median cost of getting to the first warm-up step, for the job and
    for each further worker process, and of compilation where a variant compiles."""
    sentences = []
    for machine, group in table.groupby("machine", sort=True):
        fixed = group["fixed_cost_s"].dropna()
        if not fixed.empty:
            text = (
                f"On {machine}, a configuration's fixed cost — its job's start to the first "
                f"warm-up step — is {fmt(fixed.median(), 's')} (median of {len(fixed)})"
            )
            per_process = group["process_fixed_cost_s"].dropna()
            if not per_process.empty:
                text += (
                    f", and a worker process needs {fmt(per_process.median(), 's')} from its "
                    "start to its first step"
                )
            sentences.append(text + ".")
        compiled = group.dropna(subset=["compile_time_s"])
        if not compiled.empty:
            text = (
                f"On {machine}, compilation took {fmt(compiled['compile_time_s'].median(), 's')} "
                f"in the first process (median of {len(compiled)} compiled "
                f"configuration{'s' if len(compiled) != 1 else ''})"
            )
            later = compiled["compile_time_s_later"].dropna()
            if not later.empty:
                text += (
                    f" and {fmt(later.median(), 's')} in later processes, which reuse the "
                    "first one's caches"
                )
            sentences.append(text + ".")
    return sentences


def study_cost(
    jobs: pd.DataFrame | None, summary: pd.DataFrame | None, rendered_at_unix: float
) -> dict:
    """What the study cost in wall time.

    `span_s`: from the earliest recorded job start to `rendered_at_unix` (the report);
    `busy_s`: the union of the recorded job intervals; `timed_s`: the summed timed-window
    seconds of every configuration (summary.csv `timed_window_s`) and their shares of both.
    Times are None where no job recorded when it ran.
    """
    timed = 0.0
    if summary is not None and "timed_window_s" in summary.columns:
        timed = float(pd.to_numeric(summary["timed_window_s"], errors="coerce").fillna(0).sum())
    cost = {
        "jobs": 0,
        "first_start": None,
        "rendered_at": rendered_at_unix,
        "span_s": None,
        "busy_s": None,
        "timed_s": timed,
        "timed_share_of_span": None,
        "timed_share_of_busy": None,
    }
    if jobs is None or jobs.empty:
        return cost
    intervals = list(
        zip(jobs["started_at_unix"].astype(float), jobs["ended_at_unix"].astype(float))
    )
    first = min(start for start, _ in intervals)
    span = rendered_at_unix - first
    busy = union_seconds(intervals)
    cost.update(
        jobs=len(intervals),
        first_start=first,
        span_s=span,
        busy_s=busy,
        timed_share_of_span=timed / span if span > 0 else None,
        timed_share_of_busy=timed / busy if busy > 0 else None,
    )
    return cost


def cost_sentences(cost: Mapping) -> list[str]:
    if cost["first_start"] is None:
        return [
            "No job recorded when it ran (results from before jobs kept their start and end "
            f"times), so the study's wall time is unknown; its timed windows took "
            f"{fmt_duration(cost['timed_s'])}."
        ]
    return [
        f"The study spans {fmt_duration(cost['span_s'])}, from its first recorded job start "
        f"({fmt_utc(cost['first_start'])}) to this report ({fmt_utc(cost['rendered_at'])}); "
        f"its {cost['jobs']} recorded job{'s were' if cost['jobs'] != 1 else ' was'} busy for "
        f"{fmt_duration(cost['busy_s'])} (the union of their intervals).",
        f"The timed windows took {fmt_duration(cost['timed_s'])}: "
        f"{fmt_pct(cost['timed_share_of_span'])} of the span and "
        f"{fmt_pct(cost['timed_share_of_busy'])} of the busy time (the duty cycle); the rest "
        "went to starting processes, warm-up, compilation, the stages that time nothing "
        "(ceilings, complexity, profiles) and the gaps between jobs.",
    ]


# How the wall-time table names each kind of job (singular, plural), in this order.
JOB_LABELS = {
    "run": ("timed run", "timed runs"),
    "ceilings": ("ceilings job", "ceilings jobs"),
    "complexity": ("complexity job", "complexity jobs"),
}


def cost_by_folder(jobs: pd.DataFrame | None, summary: pd.DataFrame | None) -> pd.DataFrame:
    """Per results folder (one run of the study on one machine): its machines, the jobs that
    recorded when they ran, first start and last end, busy time (union of the intervals),
    timed-window seconds and their share of the busy time."""
    columns = [
        "results_dir",
        "machines",
        "jobs",
        "first_start",
        "last_end",
        "busy_s",
        "timed_s",
        "timed_share_of_busy",
    ]
    if jobs is None or jobs.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for folder, group in jobs.groupby("results_dir", sort=False):
        mine = None
        if summary is not None and "results_dir" in summary.columns:
            mine = summary[summary["results_dir"] == folder]
        timed = (
            float(pd.to_numeric(mine["timed_window_s"], errors="coerce").fillna(0).sum())
            if mine is not None and "timed_window_s" in mine.columns
            else math.nan
        )
        busy = union_seconds(zip(group["started_at_unix"], group["ended_at_unix"]))
        kinds = group["kind"].value_counts()
        ordered = [k for k in JOB_LABELS if k in kinds.index]
        ordered += sorted(k for k in kinds.index if k not in JOB_LABELS)
        jobs_text = ", ".join(
            f"{kinds[kind]} {JOB_LABELS.get(kind, (kind, kind))[int(kinds[kind] != 1)]}"
            for kind in ordered
        )
        rows.append(
            {
                "results_dir": folder,
                "machines": (
                    ", ".join(sorted(mine["machine"].dropna().unique()))
                    if mine is not None and "machine" in mine.columns
                    else ""
                ),
                "jobs": jobs_text,
                "first_start": float(group["started_at_unix"].min()),
                "last_end": float(group["ended_at_unix"].max()),
                "busy_s": busy,
                "timed_s": timed,
                "timed_share_of_busy": timed / busy if busy > 0 else math.nan,
            }
        )
    return pd.DataFrame(rows, columns=columns)


def measurement_display(table: pd.DataFrame) -> pd.DataFrame:
    """Per configuration: processes and windows, CI half-width against its target, why it
    stopped, the dominant variance level with both components as relative standard
    deviations, fixed costs, compile times, duty cycle and the unstable flag."""
    if table.empty:
        return pd.DataFrame()
    rows = table.to_dict("records")
    return pd.DataFrame(
        {
            **key_columns(table),
            "Status": [str(r["status"]).replace("_", " ") for r in rows],
            "Processes": [int_cell(r["n_processes"], "—") for r in rows],
            "Windows": [int_cell(r["n_windows"], "—") for r in rows],
            "CI half-width": [half_width_cell(r) for r in rows],
            "Target": [fmt_pct(r["ci_target"]) for r in rows],
            "Met": [_yes_no(r["target_met"]) for r in rows],
            "Min–max (img/s)": [_range_cell(r) for r in rows],
            "Outliers": [_outliers_cell(r) for r in rows],
            "Stopped on": [STOP_LABELS.get(r["stop_reason"], "") for r in rows],
            "Dominant level": [
                r["dominant_level"] if isinstance(r["dominant_level"], str) else "" for r in rows
            ],
            "Between-process RSD": [fmt_pct(r["between_process_rsd"]) for r in rows],
            "Within-process RSD": [fmt_pct(r["within_process_rsd"]) for r in rows],
            "Fixed cost (s)": [fmt(r["fixed_cost_s"]) for r in rows],
            "Per-process fixed cost (s)": [fmt(r["process_fixed_cost_s"]) for r in rows],
            "Compile, first / later processes (s)": [compile_cell(r) for r in rows],
            "Timed (s)": [fmt(r["timed_window_s"]) for r in rows],
            "Elapsed (s)": [fmt(r["elapsed_s"]) for r in rows],
            "Duty cycle": [fmt_pct(r["duty_cycle"]) for r in rows],
            # No windows.csv (older results): unknown, shown as a dash.
            "Flagged windows": [
                (
                    None
                    if missing(r["windows_recorded"])
                    else f"{int(r['flagged_windows'])}/{int(r['windows_recorded'])}"
                )
                for r in rows
            ],
            "Unstable": [unstable_cell(r) for r in rows],
        }
    )


def half_width_cell(row) -> str:
    if not missing(row["ci_half_width_rel"]) and float(row["ci_half_width_rel"]) > 0:
        return fmt_pct(row["ci_half_width_rel"])
    if str(row["status"]) == "ok" and not missing(row["n_windows"]) and int(row["n_windows"]) < 2:
        return f"n/a, {count_of(row['n_windows'], 'window')}"
    return "n/a"


def _range_cell(row) -> str:
    """`60.0–101`: the slowest and fastest window (pyperf's min and max)."""
    if missing(row["throughput_img_s_min"]) or missing(row["throughput_img_s_max"]):
        return ""
    return f"{fmt(row['throughput_img_s_min'])}–{fmt(row['throughput_img_s_max'])}"


def _outliers_cell(row) -> str:
    """`2: p1w3, p2w0`: how many windows lie outside Tukey's fences, and which."""
    if missing(row["outliers"]):
        return ""
    which = row["outlier_windows"]
    count = int(row["outliers"])
    return f"{count}: {which}" if count and isinstance(which, str) and which else str(count)


def compile_cell(row) -> str:
    """`20.0 / 2.00`; empty for a variant that does not compile."""
    if missing(row["compile_time_s"]):
        return ""
    later = "—" if missing(row["compile_time_s_later"]) else fmt(row["compile_time_s_later"])
    return f"{fmt(row['compile_time_s'])} / {later}"


def unstable_cell(row) -> str:
    if not row["unstable"]:
        return ""
    reasons = unstable_text(row)
    return f"yes: {reasons}" if reasons else "yes"


def _yes_no(value) -> str:
    if value is None or value is pd.NA or missing(value):
        return "n/a"
    return "yes" if bool(value) else "no"


def cost_display(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    return pd.DataFrame(
        {
            "Results folder": table["results_dir"].astype(str),
            "Machines": table["machines"].astype(str),
            "Jobs recorded": table["jobs"].astype(str),
            "First start": [fmt_utc(v) for v in table["first_start"]],
            "Last end": [fmt_utc(v) for v in table["last_end"]],
            "Busy (union of jobs)": [fmt_duration(v) for v in table["busy_s"]],
            "Timed windows": [fmt_duration(v) for v in table["timed_s"]],
            "Timed share of busy": [fmt_pct(v) for v in table["timed_share_of_busy"]],
        }
    )


def page_measurement(page: Page) -> pd.DataFrame:
    """`measurement_table` of the page's summary and windows."""
    return measurement_table(page.tables.summary, page.tables.windows)


def page_cost(page: Page) -> dict:
    """`study_cost` of the page's jobs, up to when the report is written."""
    return study_cost(page.tables.jobs, page.tables.summary, page.rendered_at)


def cost_record(page: Page) -> Finding | None:
    """What measuring cost and how many configurations reached their CI target, the key
    finding this section gives (None before any job was recorded)."""
    cost = page_cost(page)
    if cost["first_start"] is None:
        return None
    met, judged = ci_target_counts(page_measurement(page))
    numbers = {k: cost[k] for k in ("busy_s", "timed_share_of_busy")}
    return Finding("measuring_cost", {}, {**numbers, "met": met, "judged": judged})


def measurement_findings(page: Page, cost: dict, measurement: pd.DataFrame) -> list[str]:
    """What the study cost, then how many configurations reached their CI target, which
    missed it and why, which variance level dominates, and the fixed costs."""
    findings = []
    if page.tables.summary is not None or page.tables.jobs is not None:
        findings += cost_sentences(cost)
    target = ci_target_sentence(measurement)
    if target:
        findings.append(target)
    findings += ci_missed_sentences(measurement)
    findings += dominant_level_sentences(measurement)
    return findings + fixed_cost_sentences(measurement)


def build(page: Page) -> Section:
    """What the measurements cost in wall time and how good they are."""
    measurement = page_measurement(page)
    folders = cost_by_folder(page.tables.jobs, page.tables.summary)
    return section(
        "measurement",
        "Measurement cost and quality",
        intro=INTRO,
        findings=measurement_findings(page, page_cost(page), measurement),
        tables=(
            Table("Measurement per configuration", page.drop(measurement_display(measurement))),
            Table("Wall time per results folder", cost_display(folders)),
        ),
        sources=page.sources("summary", "windows", "jobs"),
    )
