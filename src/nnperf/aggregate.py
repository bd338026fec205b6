"""Run JSONs -> the per-rep table (runs.csv) and the per-config summary (summary.csv).

`runs_table()` flattens run documents into one row per rep; `mark_overlaps()` checks from the
recorded start/end times that no two reps on the same machine (same host, and same GPU for
CUDA runs) ran at the same time; `summary_table()` reduces reps to one row per configuration
with the statistics of `nnperf.stats` and the speedups against the configuration's `fp32` and
`baseline` counterparts. `write_tables()` is the file edge (rule `aggregate_runs`): run
JSONs in, both tables out. Nothing here draws.
"""

from __future__ import annotations

import os
import sys
from typing import Iterable

import numpy as np
import pandas as pd

from nnperf import stats
from nnperf.contract import TablesRequest
from nnperf.errors import NnperfError
from nnperf.files import read_json, write_csv
from nnperf.vocab import (
    CONFIG_KEYS,
    PHASES,
    REFERENCE_PRECISION,
    REFERENCE_VARIANT,
    RUN_KIND,
)

REP_KEYS = (*CONFIG_KEYS, "rep")
STEP_STATS = ("median", "mean", "std", "min", "max", "p10", "p90")
SCALAR_METRICS = (
    "throughput_img_s",
    "timed_window_s",
    "images_timed",
    "compile_time_s",
    "first_step_time_s",
    "warmup_time_s",
    "peak_memory_device_bytes",
    "peak_memory_host_bytes",
    "loss_start",
    "loss_end",
    "started_at_unix",
    "ended_at_unix",
    "timed_window_started_at_unix",
    "timed_window_ended_at_unix",
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


def run_row(document: dict, source: str | None = None) -> dict:
    """One flat row of runs.csv from one run document."""
    environment = document.get("environment") or {}
    row = {key: document.get(key) for key in REP_KEYS}
    row["dataset"] = document.get("dataset")
    row["status"] = document.get("status")
    row["error"] = document.get("error")
    for metric in SCALAR_METRICS:
        row[metric] = document.get(metric)
    step = document.get("step_time_s") or {}
    for name in STEP_STATS:
        row[f"step_time_s_{name}"] = step.get(name)
    phases = document.get("phase_time_s") or {}
    for phase in PHASES:
        row[f"{phase}_s"] = phases.get(phase)
    for name, value in (document.get("variant_settings") or {}).items():
        row[f"variant_{name}"] = value
    for name in ENVIRONMENT_COLUMNS:
        row[name] = environment.get(name)
    gpu = environment.get("gpu") or {}
    row["gpu_uuid"] = gpu.get("uuid")
    row["slurm_job_id"] = (environment.get("slurm") or {}).get("job_id")
    row["source"] = source
    return row


def runs_table(documents: Iterable[tuple[str | None, dict]]) -> pd.DataFrame:
    """runs.csv: one row per rep, sorted by the keys; duplicate keys are an error."""
    rows = [run_row(document, source) for source, document in documents]
    if not rows:
        raise NnperfError("no run JSON files given; allowed: one or more")
    frame = pd.DataFrame(rows)
    duplicated = frame.duplicated(list(REP_KEYS), keep=False)
    if duplicated.any():
        first = frame.loc[duplicated, "source"].tolist()[:2]
        raise NnperfError(
            f"run files {first} hold the same configuration and rep; "
            "allowed: one file per (device, model, precision, batch_size, "
            "variant, rep)"
        )
    frame = frame.sort_values(list(REP_KEYS), kind="stable").reset_index(drop=True)
    return mark_overlaps(frame)


def _machine_key(frame: pd.DataFrame) -> pd.Series:
    """Reps compete for the same host (CPU runs) or the same GPU (CUDA runs)."""
    # object dtype first: read back from CSV, an all-empty column is float NaN.
    gpu = frame["gpu_uuid"].astype(object).where(frame["device"] == "cuda").fillna("")
    host = frame["hostname"].astype(object).fillna("")
    return host.astype(str) + "|" + gpu.astype(str)


def find_overlaps(frame: pd.DataFrame) -> list[tuple[int, int]]:
    """Index pairs of reps on the same machine whose [started, ended] intervals intersect."""
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
    """Add `overlapping_reps` (how many other reps ran at the same time) and `overlap`."""
    counts = np.zeros(len(frame), dtype=int)
    position = {label: i for i, label in enumerate(frame.index)}
    for a, b in find_overlaps(frame):
        counts[position[a]] += 1
        counts[position[b]] += 1
    return frame.assign(overlapping_reps=counts, overlap=counts > 0)


def check_no_overlap(frame: pd.DataFrame) -> None:
    """Raise NnperfError naming the first two reps that ran at the same time."""
    pairs = find_overlaps(frame)
    if pairs:
        a, b = pairs[0]

        def name(i):
            row = frame.loc[i]
            return "/".join(str(row[key]) for key in REP_KEYS)

        raise NnperfError(
            f"reps {name(a)} and {name(b)} overlapped in time on the same "
            f"machine ({len(pairs)} overlapping pair(s)); allowed: none "
            "(run timed jobs with the bench_slot resource limited to 1)"
        )


def _config_row(keys: tuple, group: pd.DataFrame, cv_threshold: float) -> dict:
    ok = group[group["status"] == "ok"]
    statuses = set(group["status"])
    status = "ok" if statuses == {"ok"} else "oom" if statuses == {"oom"} else "mixed"
    row = dict(zip((*CONFIG_KEYS, "dataset"), keys))
    row.update(n_reps=len(group), n_ok=len(ok), status=status)
    row.update(stats.describe_reps(ok["throughput_img_s"].astype(float), cv_threshold))
    row["step_time_s_median"] = stats.median(ok["step_time_s_median"].astype(float))
    for phase in PHASES:
        row[f"{phase}_s_median"] = stats.median(ok[f"{phase}_s"].astype(float))
    row["compile_time_s_median"] = stats.median(ok["compile_time_s"].astype(float))
    row["first_step_time_s_median"] = stats.median(ok["first_step_time_s"].astype(float))
    row["peak_memory_device_bytes_max"] = ok["peak_memory_device_bytes"].astype(float).max()
    row["peak_memory_host_bytes_max"] = ok["peak_memory_host_bytes"].astype(float).max()
    row["overlap"] = bool(group["overlap"].any())
    row["error"] = next((e for e in group["error"] if isinstance(e, str) and e), None)
    return row


def _speedup(summary: pd.DataFrame, fixed: str, value: str) -> pd.Series:
    """median throughput / that of the same config with `fixed` set to `value`."""
    match_keys = [key for key in (*CONFIG_KEYS, "dataset") if key != fixed]
    reference = summary.loc[
        summary[fixed] == value, [*match_keys, "throughput_img_s_median"]
    ].rename(columns={"throughput_img_s_median": "_reference"})
    merged = summary[match_keys].merge(reference, on=match_keys, how="left")
    return summary["throughput_img_s_median"].to_numpy() / merged["_reference"].to_numpy()


def summary_table(
    runs: pd.DataFrame, cv_threshold: float = TablesRequest.cv_threshold
) -> pd.DataFrame:
    """summary.csv: one row per (device, model, precision, batch_size, variant)."""
    keys = [*CONFIG_KEYS, "dataset"]
    rows = [
        _config_row(group_keys, group, cv_threshold)
        for group_keys, group in runs.groupby(keys, sort=True, dropna=False)
    ]
    summary = pd.DataFrame(rows)
    summary["speedup_vs_fp32"] = _speedup(summary, "precision", REFERENCE_PRECISION)
    summary["speedup_vs_baseline"] = _speedup(summary, "variant", REFERENCE_VARIANT)
    return summary




def read_runs(paths: Iterable[str | os.PathLike]) -> list[tuple[str, dict]]:
    """(path, document) of each run JSON; anything but a timed run's document is an error."""
    documents = []
    for path in paths:
        document = read_json(path)
        if document.get("kind") != RUN_KIND:
            raise NnperfError(
                f"{path}: kind {document.get('kind')!r} is not a timed run; "
                "allowed: run JSONs written by rule timed_run or `nnperf run`"
            )
        documents.append((str(path), document))
    return documents


def write_tables(
    request: TablesRequest,
    run_paths: Iterable[str | os.PathLike],
    out_runs: str | os.PathLike,
    out_summary: str | os.PathLike,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """runs.csv and summary.csv from run JSONs; returns both tables.

    Reps that overlapped in time are flagged in the tables and named in a warning, not an
    error: the tables are still worth reading, and the report shows the flag.
    """
    if not request.cv_threshold > 0:
        raise NnperfError(f"cv_threshold {request.cv_threshold!r} is not allowed; allowed: > 0")
    runs = runs_table(read_runs(run_paths))
    summary = summary_table(runs, request.cv_threshold)
    write_csv(out_runs, runs)
    write_csv(out_summary, summary)
    n_overlap = int(runs["overlap"].sum())
    print(
        f"{len(runs)} reps, {len(summary)} configurations, "
        f"{int((runs['status'] == 'oom').sum())} out of memory, {n_overlap} overlapping reps"
    )
    if n_overlap:
        try:
            check_no_overlap(runs)
        except NnperfError as exc:
            print(f"warning: {exc}", file=sys.stderr)
    return runs, summary
