"""Reading a `results/` folder (this machine's or another's) into tables for the report.

The report and the machine comparison read the files the pipeline writes, found by
`nnperf.report.folders` (re-exported here): the tables of `tables/{dataset}/`, the complexity,
ceilings and run JSONs (the run JSONs also for the environment when the environment table is
absent) and the operator profiles. Other machines' folders are read for the same dataset, so
a comparison never mixes data. Every file read is remembered in `ResultSet.sources` so each
report section can say where its numbers came from.

Every table is read through `read_table()`, which checks the columns its reader needs
(`REPORT_COLUMNS` for the report) and names the file, the columns missing and the rule that
writes it again, so a damaged table stops the report with one line instead of blank cells.

The JSON documents also say when their job ran (`started_at_unix`, `ended_at_unix`):
`ResultSet.jobs` collects those intervals, one row per job, so the report can say what the
study cost in wall time. Where no run JSON is read, the run jobs come from summary.csv (which
copies each document's start and end) or, failing that, from runs.csv's worker processes.
Older folders (or a complexity JSON without timestamps) simply add no row.

This module only reads; what the numbers mean is the business of
each section's module (`nnperf.report.sections`). `ResultSet` is the one set of tables the
report reads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

import pandas as pd

from nnperf.core import files
from nnperf.core.errors import NnperfError
from nnperf.core.stats import optional_number
from nnperf.core.vocab import CONFIG_KEYS
from nnperf.report import comparisons, machines
from nnperf.report.aggregate import read_runs

# The folders' files: where they are and which are read (re-exported: callers say results.X).
from nnperf.report.folders import (  # noqa: F401
    OPPROFILE_TABLES,
    RESULTS_DIR,
    TABLE_NAMES,
    FolderFiles,
    datasets_in,
    discover,
    extra_results_inputs,
    figures,
    local_files,
    opprofile_table_paths,
    with_extra_results,
)

# The rule that writes each table (named in the line about a table that lacks a column).
WRITTEN_BY = {
    "runs": "aggregate_runs",
    "windows": "aggregate_runs",
    "summary": "aggregate_runs",
    "kernels": "ncu_kernels",
    "roofline_points": "roofline_points",
    "profiles": "roofline_points",
    "training": "training_table",
    "environment": "environment_table",
    "comparisons": "comparisons_table",
    "machines_summary": "compare_machines",
}

# What the report reads of each table without a fallback: the configuration's keys and the
# headline numbers. A table without one of them (edited by hand, or cut) stops the report
# with one line, where the sections would otherwise show blanks. Columns added later are
# not required, so an older machine's folder still reads.
REPORT_COLUMNS = {
    "runs": (*CONFIG_KEYS, "process", "status", "throughput_img_s"),
    "windows": (*CONFIG_KEYS, "process", "window"),
    "summary": (
        *CONFIG_KEYS,
        "status",
        "n_processes",
        "n_windows",
        "throughput_img_s_mean",
        "throughput_img_s_ci95_low",
        "throughput_img_s_ci95_high",
        "ci_half_width_rel",
    ),
    "kernels": (*CONFIG_KEYS, "kernel_name", "duration_s"),
    "roofline_points": (*CONFIG_KEYS, "granularity", "flops", "bytes", "time_s"),
    "profiles": CONFIG_KEYS,
    "training": (*CONFIG_KEYS, "recipe", "status"),
    "environment": ("device",),
    "comparisons": ("kind", "pair", "ratio", "verdict"),
}


def read_table(
    path: str | os.PathLike, columns: Iterable[str] = (), needed_by: str = "the report", **options
) -> pd.DataFrame:
    """A table the pipeline wrote, with the `columns` its reader needs (`needed_by`): else
    one NnperfError line naming the file, the columns missing, what needs them and the rule
    that writes the table again. The one reader of tables in the report (and its figures).
    """
    name = Path(path).stem
    rule = WRITTEN_BY.get(name)
    hint = (
        f"write it again with rule {rule} (snakemake --forcerun {rule})"
        if rule
        else "write it again with the rule that made it"
    )
    return files.read_table(path, columns, needed_by, hint, **options)


@dataclass
class ResultSet:
    """The tables of one or more results folders; each frame has a `machine` column."""

    runs: pd.DataFrame | None = None
    windows: pd.DataFrame | None = None
    summary: pd.DataFrame | None = None
    kernels: pd.DataFrame | None = None
    roofline_points: pd.DataFrame | None = None
    # One row per configuration profiled under ncu (nnperf.roofline.points.profiles_table).
    profiles: pd.DataFrame | None = None
    # One row per training run to accuracy (nnperf.report.training_table.write_training_table).
    training: pd.DataFrame | None = None
    environment: pd.DataFrame | None = None
    # One row per ratio the report states, machines named inside (a_machine, b_machine).
    comparisons: pd.DataFrame | None = None
    complexity: list[dict] = field(default_factory=list)
    # One entry per (machine, device): the ceilings JSON with `machine` added.
    ceilings: list[dict] = field(default_factory=list)
    # One entry per operator profile (nnperf.torchprof.profile): its document with `machine` added,
    # and its tables by name (OPPROFILE_TABLES; an absent one is None).
    opprofiles: list[OperatorProfileFiles] = field(default_factory=list)
    # One row per job whose document recorded when it ran (JOB_COLUMNS); None when none did.
    jobs: pd.DataFrame | None = None
    # kind ("summary", "complexity", ...) -> paths read, in reading order.
    sources: dict[str, list[str]] = field(default_factory=dict)

    def add_source(self, kind: str, path: str | os.PathLike) -> None:
        self.sources.setdefault(kind, []).append(os.fspath(path))


@dataclass
class OperatorProfileFiles:
    """One operator profile as the report reads it."""

    document: dict
    tables: dict[str, pd.DataFrame | None]


def load(folders: list[FolderFiles]) -> ResultSet:
    """Read every folder, label rows with their machine and concatenate folder by folder."""
    environments: dict[str, pd.DataFrame | None] = {}
    raw: dict[str, dict[str, pd.DataFrame | None]] = {}
    result = ResultSet()
    jobs: list[dict] = []
    for folder in folders:
        run_documents = dict(read_runs(folder.run_jsons))
        frames = {}
        for name, path in folder.tables.items():
            # The environment is shown as recorded: read as text so that "9.0" (a compute
            # capability) or "13.0" (a CUDA version) do not turn into 9 and 13.
            text = {"dtype": str} if name == "environment" else {}
            frames[name] = (
                read_table(path, REPORT_COLUMNS[name], **text) if path is not None else None
            )
            if path is not None:
                result.add_source(name, path)
        if frames["environment"] is None and run_documents:
            frames["environment"] = machines.environment_frame(run_documents.values())
            for path in folder.run_jsons:
                result.add_source("environment", path)
        for path, document in run_documents.items():
            row = job_row(document, "run", folder.results_dir, path)
            if row is not None:
                jobs.append(row)
                result.add_source("jobs", path)
        if not run_documents:
            table_jobs, table = jobs_from_tables(frames, folder)
            jobs.extend(table_jobs)
            if table_jobs:
                result.add_source("jobs", table)
        if frames["environment"] is None and frames["runs"] is not None:
            frames["environment"] = environment_from_runs(frames["runs"])
            if frames["environment"] is not None:
                result.add_source("environment", folder.tables["runs"])
        environments[folder.results_dir] = frames["environment"]
        raw[folder.results_dir] = frames
    mapping = machines.machine_map(environments)
    for name in TABLE_NAMES:
        if name == "comparisons":
            result.comparisons = _combined_comparisons(raw[f.results_dir][name] for f in folders)
            continue
        if name == "environment":
            labelled = [
                _relabel_environment(raw[f.results_dir][name], mapping, f.results_dir)
                for f in folders
            ]
        else:
            labelled = [
                machines.attach_machine(raw[f.results_dir][name], mapping, f.results_dir)
                for f in folders
            ]
        setattr(result, name, machines.combine(labelled))
    _add_documents(result, folders, mapping, jobs)
    result.jobs = pd.DataFrame(jobs, columns=JOB_COLUMNS) if jobs else None
    return result


def _add_documents(
    result: ResultSet, folders: list[FolderFiles], mapping: Mapping, jobs: list[dict]
) -> None:
    """The complexity, ceilings and operator-profile documents of every folder, each model's
    complexity once, with their job rows."""
    seen_models = set()
    for folder in folders:
        for path in folder.complexity:
            document = files.read_json(path)
            result.add_source("complexity", path)
            row = job_row(document, "complexity", folder.results_dir, path)
            if row is not None:
                jobs.append(row)
                result.add_source("jobs", path)
            key = (document.get("model"), document.get("dataset"), str(document.get("input_shape")))
            if key not in seen_models:
                seen_models.add(key)
                result.complexity.append(document)
        for path in folder.ceilings:
            document = files.read_json(path)
            result.add_source("ceilings", path)
            row = job_row(document, "ceilings", folder.results_dir, path)
            if row is not None:
                jobs.append(row)
                result.add_source("jobs", path)
            labelled = machines.attach_machine(
                pd.DataFrame([{"device": document.get("device")}]), mapping, folder.results_dir
            )
            result.ceilings.append({**document, "machine": labelled["machine"].iloc[0]})
        for path in folder.opprofiles:
            result.opprofiles.append(_operator_profile(path, mapping, folder.results_dir))
            result.add_source("opprofiles", path)


def _combined_comparisons(frames: Iterable[pd.DataFrame | None]) -> pd.DataFrame | None:
    """Every folder's comparisons.csv, each ratio once: the local folder's rows come first
    and already hold the other machines'."""
    combined = machines.combine(frames)
    if combined is None:
        return None
    keys = [c for c in combined.columns if c.startswith(("kind", "pair", "a_", "b_"))]
    return combined.drop_duplicates(subset=keys)


def _operator_profile(path: Path, mapping: Mapping, results_dir: str) -> OperatorProfileFiles:
    """An operator profile's document, labelled with its machine, and its tables."""
    document = files.read_json(path)
    labelled = machines.attach_machine(
        pd.DataFrame([{"device": document.get("device")}]), mapping, results_dir
    )
    tables = {
        name: (
            read_table(table, needed_by="the report's operator section")
            if table.is_file()
            else None
        )
        for name, table in opprofile_table_paths(path).items()
    }
    return OperatorProfileFiles({**document, "machine": labelled["machine"].iloc[0]}, tables)


# One recorded job: which folder and stage, the configuration or device where it has one,
# when it ran (Unix seconds) and the file that says so.
JOB_COLUMNS = (
    "results_dir",
    "kind",
    "device",
    "model",
    "precision",
    "batch_size",
    "variant",
    "started_at_unix",
    "ended_at_unix",
    "source",
)


def job_row(document: Mapping, kind: str, results_dir: str, path: str | os.PathLike) -> dict | None:
    """When the job that wrote `document` (or the summary.csv row copied from it) ran, or
    None when it did not record it.

    A run's job starts at `process_started_at_unix` (the job's OS process, before the worker
    processes fork), which counts its fixed cost; documents without it start at
    `started_at_unix`.
    """
    started = document.get("process_started_at_unix")
    if optional_number(started) is None:
        started = document.get("started_at_unix")
    started, ended = optional_number(started), optional_number(document.get("ended_at_unix"))
    if started is None or ended is None or ended < started:
        return None
    return {
        "results_dir": results_dir,
        "kind": kind,
        **{key: document.get(key) for key in ("device", "model", "precision", "batch_size")},
        "variant": document.get("variant"),
        "started_at_unix": started,
        "ended_at_unix": ended,
        "source": os.fspath(path),
    }


def jobs_from_tables(
    frames: Mapping[str, pd.DataFrame | None], folder: FolderFiles
) -> tuple[list[dict], Path | None]:
    """Run jobs from the tables when no run JSON was read (rule render_report names only the
    tables): summary.csv's copies of each document's start and end, else runs.csv's worker
    processes. Returns the jobs and the table they came from."""
    summary = frames.get("summary")
    if summary is not None and {"ended_at_unix", *CONFIG_KEYS} <= set(summary.columns):
        rows = [
            job_row(record, "run", folder.results_dir, folder.tables["summary"])
            for record in summary.to_dict("records")
        ]
        rows = [row for row in rows if row is not None]
        if rows:
            return rows, folder.tables["summary"]
    if frames.get("runs") is not None:
        rows = jobs_from_runs(frames["runs"], folder.results_dir, folder.tables["runs"])
        if rows:
            return rows, folder.tables["runs"]
    return [], None


def jobs_from_runs(
    runs: pd.DataFrame, results_dir: str, path: str | os.PathLike | None
) -> list[dict]:
    """Run jobs from runs.csv (one row per worker process): each configuration's job spans
    its first worker's start to its last worker's end. That misses the seconds before the
    first worker starts, which the run JSON (and summary.csv) record."""
    needed = {"started_at_unix", "ended_at_unix", *CONFIG_KEYS}
    if not needed <= set(runs.columns):
        return []
    times = runs.assign(
        started_at_unix=pd.to_numeric(runs["started_at_unix"], errors="coerce"),
        ended_at_unix=pd.to_numeric(runs["ended_at_unix"], errors="coerce"),
    ).dropna(subset=["started_at_unix", "ended_at_unix"])
    if times.empty:
        return []
    spans = times.groupby(list(CONFIG_KEYS), sort=True).agg(
        started_at_unix=("started_at_unix", "min"), ended_at_unix=("ended_at_unix", "max")
    )
    return [
        {
            "results_dir": results_dir,
            "kind": "run",
            **row,
            "source": os.fspath(path) if path is not None else None,
        }
        for row in spans.reset_index().to_dict("records")
    ]


def environment_from_runs(runs: pd.DataFrame) -> pd.DataFrame | None:
    """The machine columns runs.csv carries (`hostname`, `device_name`, versions) and the
    variants' toggles (`variant_<name>`), when a folder has neither environment.csv nor run
    JSONs (results copied as tables only)."""
    if "device" not in runs.columns or not {"hostname", "device_name"} & set(runs.columns):
        return None
    frame = runs.copy()
    frame["machine"] = [
        machines.machine_label(h, n, d)
        for h, n, d in zip(
            frame.get("hostname", [None] * len(frame)),
            frame.get("device_name", [None] * len(frame)),
            frame["device"],
        )
    ]
    toggles = [c for c in frame.columns if c.startswith(machines.VARIANT_PREFIX)]
    keep = [
        c
        for c in (
            *machines.RUN_KEYS,
            "status",
            "machine",
            *(f for _, f in machines.MACHINE_FIELDS),
            *toggles,
        )
        if c in frame.columns
    ]
    return frame[list(dict.fromkeys(keep))]


def _relabel_environment(
    frame: pd.DataFrame | None, mapping: pd.DataFrame, results_dir: str
) -> pd.DataFrame | None:
    """The environment table with the (possibly disambiguated) machine label of the map."""
    if frame is None:
        return None
    if "device" not in frame.columns:
        raise NnperfError(
            f"{results_dir}: the environment table has no 'device' column; "
            "it is written by rule environment_table "
            "(nnperf.report.machines.write_environment_table)"
        )
    return machines.attach_machine(frame, mapping, results_dir)


def write_comparisons(local, extra_results, out_csv: str | os.PathLike) -> pd.DataFrame:
    """comparisons.csv of this machine's tables (`local`, a `FolderFiles`) and those
    of the `extra_results` folders (rule `comparisons_table`): machines are compared on
    every machine's runs."""
    loaded = load(with_extra_results(local, extra_results))
    table = comparisons.comparisons_table(loaded.summary, loaded.runs, loaded.training)
    files.write_csv(out_csv, table)
    print(f"comparisons: {len(table)} ratios -> {os.fspath(out_csv)}")
    return table
