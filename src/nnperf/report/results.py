"""Reading a `results/` folder (this machine's or another's) into tables for the report.

The report and the machine comparison read the files the pipeline writes, where
`nnperf.core.layout` puts them: the `tables/{dataset}/` named in TABLE_NAMES,
`complexity/{dataset}/{model}.json`, `ceilings/{device}.json` and the run JSONs under
`runs/{dataset}/` (also for the environment when the environment table is absent). A folder
may hold studies of several datasets; each read is of one of them, and other machines'
folders are read for the same dataset, so a comparison never mixes data. Every file read is remembered in
`ResultSet.sources` so each report section can say where its numbers came from.

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

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

import pandas as pd

from nnperf.core import files, layout
from nnperf.core.errors import NnperfError
from nnperf.core.files import read_table
from nnperf.core.vocab import CONFIG_KEYS, DATASETS
from nnperf.report import machines

TABLE_NAMES = (
    "runs",
    "windows",
    "summary",
    "kernels",
    "roofline_points",
    "profiles",
    "training",
    "environment",
)
# This machine's results folder: where the layout's `results/...` paths start.
RESULTS_DIR = "results"


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


# The tables written beside an operator profile's document, by the layout kind of each.
OPPROFILE_TABLES = {
    "operators": "opprofile_operators",
    "layers": "opprofile_layers",
    "steps": "opprofile_steps",
    "memory": "opprofile_memory",
}


def opprofile_table_paths(document: str | os.PathLike) -> dict[str, Path]:
    """The tables beside an operator profile's document (`x.json` -> `x_operators.csv`...):
    the layout's templates differ only in their endings."""
    stem = layout.TEMPLATES["opprofile"].removesuffix(".json")
    text = os.fspath(document).removesuffix(".json")
    return {
        name: Path(text + layout.TEMPLATES[kind].removeprefix(stem))
        for name, kind in OPPROFILE_TABLES.items()
    }


@dataclass
class FolderFiles:
    """The files of one results folder that the report reads (None: not there)."""

    results_dir: str
    tables: dict[str, Path | None]
    complexity: list[Path]
    ceilings: list[Path]
    run_jsons: list[Path]
    # The study's dataset (None: unknown, when only files were named).
    dataset: str | None = None
    # Operator profiles' documents (their tables sit beside them).
    opprofiles: list[Path] = field(default_factory=list)


def _relative(kind: str, **keys: str) -> str:
    """A layout path inside a results folder; keys not given match anything (`*`)."""
    keys = {name: keys.get(name, "*") for name in layout.fields(kind)}
    return layout.path(kind, **keys).removeprefix(f"{RESULTS_DIR}/")


def datasets_in(results_dir: str | os.PathLike) -> list[str]:
    """The datasets whose studies left tables or runs in `results_dir`."""
    root = Path(results_dir)
    found = {
        path.name
        for stage in ("tables", "runs")
        for path in (root / stage).glob("*")
        if path.is_dir() and path.name in DATASETS
    }
    return sorted(found)


def discover(results_dir: str | os.PathLike, dataset: str | None = None) -> FolderFiles:
    """The pipeline's files in `results_dir` of the study of `dataset` (None: the folder's
    only one), where `nnperf.core.layout` puts them."""
    root = Path(results_dir)
    if not root.is_dir():
        raise NnperfError(
            f"results folder {os.fspath(results_dir)!r} does not exist; give a folder this "
            "pipeline wrote (with tables/, complexity/, ceilings/ inside)"
        )
    present = datasets_in(root)
    if dataset is None and len(present) > 1:
        raise NnperfError(
            f"results folder {os.fspath(results_dir)!r} holds studies of several datasets "
            f"({', '.join(present)}); choose one with --dataset"
        )
    if dataset is None:
        dataset = present[0] if present else None
    elif dataset not in DATASETS:
        raise NnperfError(f"dataset {dataset!r} is unknown; allowed: {', '.join(DATASETS)}")
    if dataset is None:
        return FolderFiles(
            os.fspath(results_dir),
            dict.fromkeys(TABLE_NAMES),
            [],
            sorted(root.glob(_relative("ceilings"))),
            [],
        )
    tables = {}
    for name in TABLE_NAMES:
        path = root / _relative("table", dataset=dataset, name=name)
        tables[name] = path if path.is_file() else None
    return FolderFiles(
        results_dir=os.fspath(results_dir),
        tables=tables,
        complexity=sorted(root.glob(_relative("complexity", dataset=dataset))),
        ceilings=sorted(root.glob(_relative("ceilings"))),
        run_jsons=sorted(root.glob(_relative("run", dataset=dataset))),
        dataset=dataset,
        opprofiles=sorted(root.glob(_relative("opprofile", dataset=dataset))),
    )


def local_files(
    results_dir: str | os.PathLike | None = None,
    tables: Mapping[str, str | os.PathLike | None] | None = None,
    complexity: Iterable[str | os.PathLike] = (),
    ceilings: Iterable[str | os.PathLike] = (),
    run_jsons: Iterable[str | os.PathLike] = (),
    dataset: str | None = None,
    opprofiles: Iterable[str | os.PathLike] = (),
) -> FolderFiles:
    """This machine's files of the study of `dataset`: those found in `results_dir` (none
    when None), then the ones named (`tables` by TABLE_NAMES; a None entry is not there),
    each of which must exist."""
    if results_dir is not None:
        folder = discover(results_dir, dataset)
    else:
        folder = FolderFiles(RESULTS_DIR, dict.fromkeys(TABLE_NAMES), [], [], [], dataset)
    for name, path in (tables or {}).items():
        if name not in TABLE_NAMES:
            raise NnperfError(f"table {name!r} is not read; allowed: {', '.join(TABLE_NAMES)}")
        if path is not None:
            folder.tables[name] = _existing(path, f"{name} table")
    folder.complexity = list(
        dict.fromkeys([*folder.complexity, *(_existing(p, "complexity") for p in complexity)])
    )
    folder.ceilings = list(
        dict.fromkeys([*folder.ceilings, *(_existing(p, "ceilings") for p in ceilings)])
    )
    folder.run_jsons = list(
        dict.fromkeys([*folder.run_jsons, *(_existing(p, "run JSON") for p in run_jsons)])
    )
    folder.opprofiles = list(
        dict.fromkeys([*folder.opprofiles, *(_existing(p, "operator profile") for p in opprofiles)])
    )
    return folder


def with_extra_results(
    local: FolderFiles, extra_results: Iterable[str | os.PathLike]
) -> list[FolderFiles]:
    """This machine's files, then every folder of config `report.extra_results`, read for
    the same dataset as this machine's (a folder without a study of it is an error)."""
    folders = [local]
    for path in extra_results:
        if not Path(path).is_dir():
            raise NnperfError(
                f"report.extra_results entry {os.fspath(path)!r} is not a folder; give the "
                "results/ folder another machine's run wrote"
            )
        present = datasets_in(path)
        if local.dataset is not None and present and local.dataset not in present:
            raise NnperfError(
                f"report.extra_results entry {os.fspath(path)!r} has no results of dataset "
                f"{local.dataset!r} (it has: {', '.join(present)}); machines are compared on "
                "the same data only"
            )
        folders.append(discover(path, local.dataset))
    return folders


def figures(folders: Iterable[FolderFiles]) -> list[str]:
    """Every PNG under the `figures/` of each folder, folder by folder, except those of
    another dataset's study."""
    shown = []
    for folder in folders:
        others = set(DATASETS) - {folder.dataset}
        for path in sorted(Path(folder.results_dir, "figures").glob("**/*.png")):
            if not others & set(path.relative_to(folder.results_dir).parts):
                shown.append(os.fspath(path))
    return shown


def _existing(path: str | os.PathLike, what: str) -> Path:
    if not Path(path).is_file():
        raise NnperfError(f"{what} {os.fspath(path)!r}: file not found")
    return Path(path)


def load(folders: list[FolderFiles]) -> ResultSet:
    """Read every folder, label rows with their machine and concatenate folder by folder."""
    environments: dict[str, pd.DataFrame | None] = {}
    raw: dict[str, dict[str, pd.DataFrame | None]] = {}
    result = ResultSet()
    jobs: list[dict] = []
    for folder in folders:
        run_documents = {path: files.read_json(path) for path in folder.run_jsons}
        frames = {}
        for name, path in folder.tables.items():
            # The environment is shown as recorded: read as text so that "9.0" (a compute
            # capability) or "13.0" (a CUDA version) do not turn into 9 and 13.
            text = {"dtype": str} if name == "environment" else {}
            frames[name] = read_table(path, **text) if path is not None else None
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
    result.jobs = pd.DataFrame(jobs, columns=JOB_COLUMNS) if jobs else None
    return result


def _operator_profile(path: Path, mapping: Mapping, results_dir: str) -> OperatorProfileFiles:
    """An operator profile's document, labelled with its machine, and its tables."""
    document = files.read_json(path)
    labelled = machines.attach_machine(
        pd.DataFrame([{"device": document.get("device")}]), mapping, results_dir
    )
    tables = {
        name: read_table(table) if table.is_file() else None
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
    if _number(started) is None:
        started = document.get("started_at_unix")
    started, ended = _number(started), _number(document.get("ended_at_unix"))
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


def _number(value) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def environment_from_runs(runs: pd.DataFrame) -> pd.DataFrame | None:
    """The machine columns runs.csv carries (`hostname`, `device_name`, versions), when a
    folder has neither environment.csv nor run JSONs (results copied as tables only)."""
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
    keep = [
        c
        for c in (*machines.RUN_KEYS, "status", "machine", *(f for _, f in machines.MACHINE_FIELDS))
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
            f"{results_dir}/{_relative('table', name='environment')} has no 'device' column; "
            "it is written by rule environment_table "
            "(nnperf.report.machines.write_environment_table)"
        )
    return machines.attach_machine(frame, mapping, results_dir)
