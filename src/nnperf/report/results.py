"""Reading `results/` folders (this machine's and others') into the report's tables. A damaged
table stops the report with one line (`read_table`); every file read is kept in
`ResultSet.sources` so a section can say where its numbers came from, and when each job ran
in `ResultSet.jobs` (the study's cost in wall time)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

import pandas as pd

from nnperf.core import files
from nnperf.core.stats import optional_number
from nnperf.core.vocab import CONFIG_KEYS
from nnperf.report import comparisons, machines
from nnperf.report.aggregate import read_runs

# The folders' files (re-exported: callers say results.X).
from nnperf.report.folders import RESULTS_DIR, TABLE_NAMES, TABLES, FolderFiles, discover
from nnperf.report.folders import figures, local_files, opprofile_table_paths, with_extra_results


def read_table(
    path: str | os.PathLike, columns: Iterable[str] = (), needed_by: str = "the report", **options
) -> pd.DataFrame:
    """A table the pipeline wrote, with the `columns` `needed_by` needs: else one line naming
    the file, the columns missing and the rule that writes it again."""
    rule = TABLES.get(Path(path).stem, (None,))[0]
    hint = f"write it again with rule {rule} (snakemake --forcerun {rule})"
    hint = hint if rule else "write it again with the rule that made it"
    return files.read_table(path, columns, needed_by, hint, **options)


@dataclass
class ResultSet:
    """The tables of one or more results folders; each frame has a `machine` column."""

    runs: pd.DataFrame | None = None
    windows: pd.DataFrame | None = None
    summary: pd.DataFrame | None = None
    kernels: pd.DataFrame | None = None
    roofline_points: pd.DataFrame | None = None
    profiles: pd.DataFrame | None = None  # configurations profiled under ncu
    training: pd.DataFrame | None = None  # training runs to accuracy
    environment: pd.DataFrame | None = None
    # One row per ratio the report states, machines named inside (a_machine, b_machine).
    comparisons: pd.DataFrame | None = None
    complexity: list[dict] = field(default_factory=list)
    # Documents with `machine` added: per (machine, device), and per operator profile.
    ceilings: list[dict] = field(default_factory=list)
    opprofiles: list[OperatorProfileFiles] = field(default_factory=list)
    jobs: pd.DataFrame | None = None  # JOB_COLUMNS of the jobs that recorded when they ran
    sources: dict[str, list[str]] = field(default_factory=dict)

    def add_source(self, kind: str, path: str | os.PathLike) -> None:
        self.sources.setdefault(kind, []).append(os.fspath(path))


@dataclass
class OperatorProfileFiles:
    document: dict
    tables: dict[str, pd.DataFrame | None]


def load(folders: list[FolderFiles]) -> ResultSet:
    """Read every folder, label rows with their machine and concatenate folder by folder."""
    result, jobs = ResultSet(), []
    raw = {folder.results_dir: _read_folder(folder, result, jobs) for folder in folders}
    mapping = machines.machine_map({d: frames["environment"] for d, frames in raw.items()})
    dirs = [folder.results_dir for folder in folders]
    for name in TABLE_NAMES:
        frames = [raw[d][name] for d in dirs]
        if name != "comparisons":
            frames = [machines.attach_machine(t, mapping, d) for t, d in zip(frames, dirs)]
        setattr(result, name, machines.combine(frames))
    if result.comparisons is not None:
        # The local folder's rows come first and already hold the other machines'.
        keys = [c for c in result.comparisons if c.startswith(("kind", "pair", "a_", "b_"))]
        result.comparisons = result.comparisons.drop_duplicates(subset=keys)
    complexity = {}
    for folder in folders:
        for path in folder.complexity:
            document = _document(result, jobs, "complexity", folder, path)
            key = (document.get("model"), document.get("dataset"), str(document.get("input_shape")))
            complexity.setdefault(key, document)
        for path in folder.ceilings:
            document = _document(result, jobs, "ceilings", folder, path)
            result.ceilings.append(_labelled(document, mapping, folder.results_dir))
        for path in folder.opprofiles:
            paths, needed = opprofile_table_paths(path), "the report's operator section"
            tables = {
                n: read_table(t, needed_by=needed) if t.is_file() else None
                for n, t in paths.items()
            }
            document = _labelled(files.read_json(path), mapping, folder.results_dir)
            result.opprofiles.append(OperatorProfileFiles(document, tables))
            result.add_source("opprofiles", path)
    result.complexity = list(complexity.values())
    result.jobs = pd.DataFrame(jobs, columns=JOB_COLUMNS) if jobs else None
    return result


def _read_folder(folder: FolderFiles, result: ResultSet, jobs: list[dict]) -> dict:
    """One folder's tables by name (None: absent), the environment from the run JSONs or
    runs.csv where it has no environment.csv."""
    documents = dict(read_runs(folder.run_jsons))
    frames = {}
    for name, path in folder.tables.items():
        # The environment is shown as recorded: as text, "9.0" (a compute capability) or
        # "13.0" (a CUDA version) do not turn into 9 and 13.
        text = {"dtype": str} if name == "environment" else {}
        frames[name] = None if path is None else read_table(path, TABLES[name][1], **text)
        if path is not None:
            result.add_source(name, path)
    if frames["environment"] is None and documents:
        frames["environment"] = machines.environment_frame(documents.values())
        for path in folder.run_jsons:
            result.add_source("environment", path)
    elif frames["environment"] is None and frames["runs"] is not None:
        frames["environment"] = machines.environment_from_runs(frames["runs"])
        if frames["environment"] is not None:
            result.add_source("environment", folder.tables["runs"])
    for path, document in documents.items():
        _add_job(result, jobs, job_row(document, "run", folder.results_dir, path), path)
    if not documents:
        for kind in ("summary", "runs"):
            rows = _table_jobs(frames[kind], kind, folder)
            if rows:
                jobs += rows
                result.add_source("jobs", folder.tables[kind])
                break
    return frames


def _add_job(result: ResultSet, jobs: list[dict], row: dict | None, path) -> None:
    if row is not None:
        jobs.append(row)
        result.add_source("jobs", path)


def _document(result: ResultSet, jobs: list, kind: str, folder: FolderFiles, path) -> dict:
    document = files.read_json(path)
    result.add_source(kind, path)
    _add_job(result, jobs, job_row(document, kind, folder.results_dir, path), path)
    return document


def _labelled(document: dict, mapping: pd.DataFrame, results_dir: str) -> dict:
    device = pd.DataFrame([{"device": document.get("device")}])
    machine = machines.attach_machine(device, mapping, results_dir)["machine"].iloc[0]
    return {**document, "machine": machine}


# One recorded job: which folder and stage, the configuration or device where it has one,
# when it ran (Unix seconds) and the file that says so.
JOB_COLUMNS = ("results_dir", "kind", *CONFIG_KEYS, "started_at_unix", "ended_at_unix", "source")


def job_row(document: Mapping, kind: str, results_dir: str, path) -> dict | None:
    """When the job that wrote `document` (or summary.csv's copy of it) ran, or None where it
    did not record it. A run's job starts at `process_started_at_unix` (before the workers
    fork: its fixed cost counts), else at `started_at_unix`."""
    started = optional_number(document.get("process_started_at_unix"))
    if started is None:
        started = optional_number(document.get("started_at_unix"))
    ended = optional_number(document.get("ended_at_unix"))
    if started is None or ended is None or ended < started:
        return None
    source = os.fspath(path) if path is not None else None
    keys = [document.get(key) for key in CONFIG_KEYS]
    return dict(zip(JOB_COLUMNS, (results_dir, kind, *keys, started, ended, source)))


def _table_jobs(table: pd.DataFrame | None, name: str, folder: FolderFiles) -> list[dict]:
    """Run jobs from summary.csv (copies of each document's start and end) or, from runs.csv,
    each configuration's first worker's start to its last one's end (which misses the
    seconds before the first worker)."""
    needed = {"ended_at_unix", *CONFIG_KEYS, *(["started_at_unix"] if name == "runs" else [])}
    if table is None or not needed <= set(table):
        return []
    if name == "runs":
        times = table[["started_at_unix", "ended_at_unix"]].apply(pd.to_numeric, errors="coerce")
        times = table[list(CONFIG_KEYS)].join(times).dropna()
        spans = {"started_at_unix": "min", "ended_at_unix": "max"}
        table = times.groupby(list(CONFIG_KEYS)).agg(spans).reset_index()
    path = folder.tables[name]
    rows = [job_row(r, "run", folder.results_dir, path) for r in table.to_dict("records")]
    return [row for row in rows if row is not None]


def write_comparisons(local, extra_results, out_csv: str | os.PathLike) -> pd.DataFrame:
    """comparisons.csv (rule `comparisons_table`) of this machine's and the `extra_results`
    folders' tables: machines are compared on every machine's runs."""
    loaded = load(with_extra_results(local, extra_results))
    table = comparisons.comparisons_table(loaded.summary, loaded.runs, loaded.training)
    files.write_csv(out_csv, table)
    print(f"comparisons: {len(table)} ratios -> {os.fspath(out_csv)}")
    return table
