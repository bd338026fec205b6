"""Run JSONs -> runs.csv (per process), windows.csv (per window), summary.csv (per configuration).

One run document holds the whole measurement of one configuration: its worker processes
(`processes`), every timed window (`windows`) and the estimate the engine made from them
(the mean throughput with its two-level t-interval, variance components, stop reason,
stability flags). This module does not re-estimate anything: it flattens those documents
into tidy tables and adds what needs more than one document:

- `runs_table()`: one row per worker process; a configuration that never measured a window
  (status `oom` or `over_budget`) still gets a row, so it appears in every table. Its
  `group` and `round` say which processes ran next to each other in an interleaved job
  (empty for runs measured before interleaving).
- `windows_table()`: one row per timed window (`vocab.WINDOW_CSV_COLUMNS`).
- `mark_overlaps()`: from the recorded start/end of every process, whether two processes on
  the same machine (same host, and same GPU for CUDA runs) ran at the same time — processes
  of one configuration run one after another, so any overlap means two jobs shared the
  machine.
- `summary_table()`: one row per configuration, the document's estimate plus the overlap flag,
  the input pipeline's verdict beside the loader's own rate (`nnperf.report.input_verdict`),
  the high-variance flag and the noise causes. The ratios between configurations are
  comparisons.csv's (`nnperf.report.comparisons`).

`write_tables()` is the file edge (rule `aggregate_runs`). Keys come from the documents,
never from paths. Nothing here draws.
"""

from __future__ import annotations

import os
from typing import Iterable

import numpy as np
import pandas as pd

from nnperf.core import stats
from nnperf.core.contract import TablesRequest
from nnperf.core.errors import NnperfError
from nnperf.core.files import check_run_tables, read_json, write_csv
from nnperf.core.wording import missing, stop_numbers_of, unstable_columns
from nnperf.core.jobs import warn
from nnperf.core.vocab import (
    CONFIG_KEYS,
    PHASES,
    RUN_KIND,
    RUN_STATUSES,
    STOP_NUMBERS,
    WINDOW_CSV_COLUMNS,
)
from nnperf.report import comparisons, input_verdict, noise

PROCESS_KEYS = (*CONFIG_KEYS, "process")
SUMMARY_KEYS = (*CONFIG_KEYS, "dataset")
# Per-process numbers copied from the document's `processes` entries.
PROCESS_METRICS = (
    "throughput_img_s",
    "n_windows",
    # The feeder alone, after its timed windows (nnperf.engine.loader).
    "loader_rate_img_s",
    "n_loader_windows",
    "compile_time_s",
    "first_step_time_s",
    "warmup_time_s",
    "fixed_cost_s",
    "peak_memory_device_bytes",
    "peak_memory_device_warmup_bytes",
    "peak_memory_host_bytes",
    "started_at_unix",
    "ended_at_unix",
)
ENVIRONMENT_COLUMNS = (
    "device_name",
    "hostname",
    "torch",
    "cuda",
    "cudnn",
    "driver",
    "cpu_threads",
    "git_commit",
)
# Scalars of the run document copied into summary.csv under the same name, in this order
# after the estimate's columns (see `summary_row`).
SUMMARY_TIMES = (
    "single_step_time_s",
    "single_step_time_is_lower_bound",
    "compile_time_s",
    "compile_time_s_later",
    "first_step_time_s",
    "warmup_time_s",
    "fixed_cost_s",
    "process_fixed_cost_s",
    "images_timed",
    "timed_window_s",
    "elapsed_s",
    "duty_cycle",
)


def _config_name(row) -> str:
    return "/".join(str(row[key]) for key in CONFIG_KEYS)


def process_rows(document: dict, source: str | None = None) -> list[dict]:
    """The rows of runs.csv for one run document: one per worker process.

    A document without processes (out of memory before the first worker, or a step too slow
    for the budget) gives one row for process 0 with the job's own start and end, so the
    configuration is listed and its time on the machine still counts in the overlap check.
    """
    environment = document.get("environment") or {}
    head = {key: document.get(key) for key in CONFIG_KEYS}
    shared = {
        "dataset": document.get("dataset"),
        "status": document.get("status"),
        "error": document.get("error"),
        # The interleaved job the configuration was measured in (empty before interleaving):
        # processes of one group with the same `round` ran next to each other.
        "group": document.get("group"),
    }
    tail = {f"variant_{k}": v for k, v in (document.get("variant_settings") or {}).items()}
    tail.update({name: environment.get(name) for name in ENVIRONMENT_COLUMNS})
    tail["gpu_uuid"] = (environment.get("gpu") or {}).get("uuid")
    tail["slurm_job_id"] = (environment.get("slurm") or {}).get("job_id")
    tail["source"] = source
    processes = document.get("processes") or [
        {
            "process": 0,
            "started_at_unix": document.get("started_at_unix"),
            "ended_at_unix": document.get("ended_at_unix"),
        }
    ]
    rows = []
    for process in processes:
        row = {**head, "process": process.get("process"), "round": process.get("round")}
        row.update(shared)
        row["process_status"] = process.get("status")
        row["seed"] = process.get("seed")
        row["pid"] = process.get("pid")
        for metric in PROCESS_METRICS:
            row[metric] = process.get(metric)
        rows.append({**row, **tail})
    return rows


def _checked(documents: Iterable[tuple[str | None, dict]]) -> list[tuple[str | None, dict]]:
    """The documents, refused when there are none or two hold the same configuration."""
    documents = list(documents)
    if not documents:
        raise NnperfError("no run JSON files given; allowed: one or more")
    seen: dict[tuple, str | None] = {}
    for source, document in documents:
        keys = tuple(document.get(key) for key in CONFIG_KEYS)
        if keys in seen:
            raise NnperfError(
                f"run files {seen[keys]} and {source} hold the same configuration "
                f"{'/'.join(map(str, keys))}; allowed: one file per (device, model, "
                "precision, batch_size, variant)"
            )
        seen[keys] = source
    return documents


def runs_table(documents: Iterable[tuple[str | None, dict]]) -> pd.DataFrame:
    """runs.csv: one row per worker process, sorted by the keys, with the overlap columns."""
    rows = [
        row for source, document in _checked(documents) for row in process_rows(document, source)
    ]
    frame = pd.DataFrame(rows)
    frame = frame.sort_values(list(PROCESS_KEYS), kind="stable").reset_index(drop=True)
    return mark_overlaps(frame)


def windows_table(documents: Iterable[tuple[str | None, dict]]) -> pd.DataFrame:
    """windows.csv: one row per timed window of every configuration (none for oom ones)."""
    columns = [*CONFIG_KEYS, *WINDOW_CSV_COLUMNS, "dataset"]
    rows = []
    for _, document in _checked(documents):
        keys = {key: document.get(key) for key in CONFIG_KEYS}
        for window in document.get("windows") or []:
            rows.append(
                {
                    **keys,
                    **{name: window.get(name) for name in WINDOW_CSV_COLUMNS},
                    "dataset": document.get("dataset"),
                }
            )
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values([*CONFIG_KEYS, "process", "window"], kind="stable").reset_index(
        drop=True
    )


def _machine_key(frame: pd.DataFrame) -> pd.Series:
    """Processes compete for the same host (CPU runs) or the same GPU (CUDA runs)."""
    # object dtype first: read back from CSV, an all-empty column is float NaN.
    gpu = frame["gpu_uuid"].astype(object).where(frame["device"] == "cuda").fillna("")
    host = frame["hostname"].astype(object).fillna("")
    return host.astype(str) + "|" + gpu.astype(str)


def find_overlaps(frame: pd.DataFrame) -> list[tuple[int, int]]:
    """Index pairs of processes on the same machine whose [started, ended] intervals intersect."""
    pairs = []
    machine = _machine_key(frame)
    for _, group in frame.assign(_machine=machine).groupby("_machine", sort=False):
        ordered = group.sort_values("started_at_unix")
        starts = ordered["started_at_unix"].to_numpy(dtype=float)
        ends = ordered["ended_at_unix"].to_numpy(dtype=float)
        index = ordered.index.to_numpy()
        for i in range(len(ordered)):
            # Sorted by start: only later starts before this end can intersect.
            j = i + 1
            while j < len(ordered) and starts[j] < ends[i]:
                pairs.append(tuple(sorted((int(index[i]), int(index[j])))))
                j += 1
    return sorted(pairs)


def mark_overlaps(frame: pd.DataFrame) -> pd.DataFrame:
    """Add `overlapping_processes` (how many other processes ran at the same time on the same
    machine) and `overlap`."""
    counts = np.zeros(len(frame), dtype=int)
    position = {label: i for i, label in enumerate(frame.index)}
    for a, b in find_overlaps(frame):
        counts[position[a]] += 1
        counts[position[b]] += 1
    return frame.assign(overlapping_processes=counts, overlap=counts > 0)


def check_no_overlap(frame: pd.DataFrame) -> None:
    """Raise NnperfError naming the first two processes that ran at the same time."""
    pairs = find_overlaps(frame)
    if pairs:
        a, b = pairs[0]

        def name(i):
            row = frame.loc[i]
            return f"{_config_name(row)} process {row['process']}"

        raise NnperfError(
            f"processes {name(a)} and {name(b)} overlapped in time on the same "
            f"machine ({len(pairs)} overlapping pair(s)); allowed: none "
            "(run timed jobs with the bench_slot resource limited to 1)"
        )


def summary_row(document: dict, cv_threshold: float = TablesRequest.cv_threshold) -> dict:
    """One row of summary.csv from one run document (overlap and speedups come later): the
    engine's estimate, the spread of the windows with pyperf's min, max and Tukey outliers,
    and for a configuration that missed its CI target the likely cause of its noise and what
    the target would take (`nnperf.report.noise`)."""
    row = {key: document.get(key) for key in SUMMARY_KEYS}
    stop_numbers = stop_numbers_of(document)
    row.update(
        status=document.get("status"),
        stop_reason=document.get("stop_reason"),
        **{f"stop_{name}": stop_numbers.get(name) for name in STOP_NUMBERS},
        over_budget_phase=document.get("over_budget_phase"),
        error=document.get("error"),
        n_processes=document.get("n_processes"),
        n_windows=document.get("n_windows"),
        # The headline: the mean of the per-process throughputs, the number the engine's
        # confidence interval is for.
        throughput_img_s_mean=document.get("throughput_img_s"),
        throughput_img_s_ci95_low=document.get("throughput_img_s_ci95_low"),
        throughput_img_s_ci95_high=document.get("throughput_img_s_ci95_high"),
        ci_half_width_rel=document.get("ci_half_width_rel"),
        ci_target=(document.get("timing") or {}).get("target_ci"),
        ci_target_met=document.get("ci_target_met"),
        ci_method=document.get("ci_method"),
    )
    # Spread across all windows: what a reader sees of the noise, not the estimate.
    q1, q3 = document.get("throughput_img_s_q1"), document.get("throughput_img_s_q3")
    cv = document.get("throughput_img_s_cv")
    row.update(
        throughput_img_s_median=document.get("throughput_img_s_median"),
        throughput_img_s_q1=q1,
        throughput_img_s_q3=q3,
        throughput_img_s_iqr=q3 - q1 if q1 is not None and q3 is not None else None,
        throughput_img_s_cv=cv,
        high_variance=stats.is_high_variance(np.nan if cv is None else cv, cv_threshold),
    )
    # pyperf's `stats` beside them: min, max and the Tukey outliers of the window throughputs.
    row.update(noise.spread_columns(document.get("windows") or []))
    variance = document.get("variance") or {}
    row.update(
        variance_between_processes=variance.get("between_processes"),
        variance_within_process=variance.get("within_process"),
        dominant_level=variance.get("dominant_level"),
        optimal_windows_per_process=variance.get("optimal_windows_per_process"),
    )
    row["step_time_s_median"] = (document.get("step_time_s") or {}).get("median")
    phases = document.get("phase_time_s") or {}
    for phase in PHASES:
        row[f"{phase}_s_median"] = phases.get(phase)
    for name in SUMMARY_TIMES:
        row[name] = document.get(name)
    # The loader's own rate beside the throughput, the data-wait share and whether the input
    # pipeline limits the configuration (nnperf.report.input_verdict has the rule).
    row.update(input_verdict.summary_columns(document))
    row["unstable"] = bool(document.get("unstable"))
    row.update(unstable_columns(document))
    # Why a configuration that missed its CI target was noisy (nnperf.report.noise).
    row.update(noise.noise_columns(document))
    # The SM clock the timed windows ran at (NVML, sampled per window): a profile taken at
    # another clock (ncu locks base clocks) is scaled to it (nnperf.roofline.points.profiles_table).
    clocks = [w.get("sm_clock_mhz") for w in document.get("windows") or []]
    clocks = [float(c) for c in clocks if c is not None and np.isfinite(float(c))]
    row["sm_clock_hz_median"] = float(np.median(clocks)) * 1e6 if clocks else None
    # The timed steps' peak, and the warm-up's beside it (cuDNN autotuning, compilation and
    # graph recording hold memory no timed step does).
    row["peak_memory_device_bytes_max"] = document.get("peak_memory_device_bytes")
    row["peak_memory_device_warmup_bytes_max"] = document.get("peak_memory_device_warmup_bytes")
    row["peak_memory_host_bytes_max"] = document.get("peak_memory_host_bytes")
    for name in ("process_started_at_unix", "started_at_unix", "ended_at_unix"):
        row[name] = document.get(name)
    return row


def summary_table(
    documents: Iterable[tuple[str | None, dict]],
    runs: pd.DataFrame,
    cv_threshold: float = TablesRequest.cv_threshold,
) -> pd.DataFrame:
    """summary.csv: one row per configuration, sorted by the keys.

    `runs` is `runs_table(documents)`: a configuration is flagged `overlap` when any of its
    processes ran at the same time as another process on its machine.
    """
    rows = [summary_row(document, cv_threshold) for _, document in _checked(documents)]
    summary = pd.DataFrame(rows)
    overlapped = {
        tuple(keys) for keys in runs.loc[runs["overlap"], list(CONFIG_KEYS)].itertuples(index=False)
    }
    summary["overlap"] = [
        tuple(keys) in overlapped for keys in summary[list(CONFIG_KEYS)].itertuples(index=False)
    ]
    summary = summary.sort_values(list(SUMMARY_KEYS), kind="stable").reset_index(drop=True)
    return _with_shared_slowdowns(summary, runs)


def _with_shared_slowdowns(summary: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The noise columns of each configuration that missed its target, led by
    the machine slowing under its whole group where its processes followed the other
    members' of the same rounds (`nnperf.report.noise.shared_slowdown`)."""
    if "group" not in runs.columns or "noise_cause" not in summary.columns:
        return summary
    for index, row in summary.iterrows():
        if missing(row["noise_cause"]):
            continue
        own = comparisons.process_rates(runs, row)
        groups = set(own["group"].dropna())
        if len(groups) != 1:
            continue
        members = runs.loc[runs["group"] == groups.pop(), list(CONFIG_KEYS)].drop_duplicates()
        others = [
            comparisons.rates_by_round(comparisons.process_rates(runs, member)).to_dict()
            for member in members.to_dict("records")
            if any(str(member[k]) != str(row[k]) for k in CONFIG_KEYS)
        ]
        found = noise.shared_slowdown(comparisons.rates_by_round(own).to_dict(), others)
        columns = noise.with_shared_slowdown(row.to_dict(), found)
        summary.loc[index, list(columns)] = list(columns.values())
    return summary


def read_runs(paths: Iterable[str | os.PathLike]) -> list[tuple[str, dict]]:
    """(path, document) of each run JSON; anything but a timed run's document is an error.

    Every file is read before any is refused, and the one error names every bad file with
    why (a study with two corrupt files is fixed in one round, not two).
    """
    documents, problems = [], []
    for path in paths:
        try:
            documents.append((str(path), _run_document(path)))
        except NnperfError as exc:
            problems.append(str(exc))
    if problems:
        raise NnperfError(_unusable(problems))
    return documents


def _unusable(problems: list[str]) -> str:
    """One line for every run JSON that cannot be read, and the way out."""
    head = "" if len(problems) == 1 else f"{len(problems)} run JSON files are unusable: "
    return (
        f"{head}{' | '.join(problems)} (delete it and run snakemake again to copy it again "
        "from its group's folder, results/runs/<dataset>/<device>/<model>/groups/bs<batch>; "
        "delete that folder as well to measure its configurations again)"
    )


def _run_document(path: str | os.PathLike) -> dict:
    document = read_json(path)
    check_run_tables(path)
    if document.get("kind") != RUN_KIND:
        raise NnperfError(
            f"{path}: kind {document.get('kind')!r} is not a timed run; "
            "allowed: run JSONs written by rule timed_run or `nnperf run`"
        )
    if document.get("status") not in RUN_STATUSES:
        raise NnperfError(
            f"{path}: status {document.get('status')!r} is not allowed; "
            f"allowed: {', '.join(RUN_STATUSES)}"
        )
    return document


def write_tables(
    request: TablesRequest,
    run_paths: Iterable[str | os.PathLike],
    out_runs: str | os.PathLike,
    out_windows: str | os.PathLike,
    out_summary: str | os.PathLike,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """runs.csv, windows.csv and summary.csv from run JSONs; returns the three tables.

    Processes that overlapped in time are flagged in the tables and named in a warning, not
    an error: the tables are still worth reading, and the report shows the flag.
    """
    if not request.cv_threshold > 0:
        raise NnperfError(f"cv_threshold {request.cv_threshold!r} is not allowed; allowed: > 0")
    documents = read_runs(run_paths)
    if not documents:
        raise NnperfError(
            "no run JSON files given: tables of zero runs would replace finished ones; "
            "give the run JSONs of at least one configuration"
        )
    runs = runs_table(documents)
    windows = windows_table(documents)
    summary = summary_table(documents, runs, request.cv_threshold)
    # Written only once all three are built, each atomically: a failure above leaves the
    # previous tables as they were (rule aggregate_runs flags them `update`, so Snakemake
    # neither removes them before the job nor keeps a half-done set after it).
    write_csv(out_runs, runs)
    write_csv(out_windows, windows)
    write_csv(out_summary, summary)
    n_overlap = int(runs["overlap"].sum())
    counts = summary["status"].value_counts()
    print(
        f"{len(summary)} configurations, {len(runs)} processes, {len(windows)} windows, "
        f"{int(counts.get('oom', 0))} out of memory, {int(counts.get('over_budget', 0))} "
        f"over budget, {n_overlap} overlapping processes"
    )
    if n_overlap:
        try:
            check_no_overlap(runs)
        except NnperfError as exc:
            warn(str(exc))
    return runs, windows, summary
