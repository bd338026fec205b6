"""Reading a `results/` folder (this machine's or another's) into tables for the report.

The report and the machine comparison read the files the pipeline writes, where
`nnperf.layout` puts them: `tables/{runs,summary,kernels,roofline_points,environment}.csv`,
`complexity/{model}.json`, `ceilings/{device}.json` and, for the environment when
`tables/environment.csv` is absent, the run JSONs under `runs/`. Every file read is remembered
in `ResultSet.sources` so each report section can say where its numbers came from.

This module only reads; what the numbers mean is `nnperf.report`'s business.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

import pandas as pd

from nnperf import files, layout, machines
from nnperf.errors import NnperfError

TABLE_NAMES = ("runs", "summary", "kernels", "roofline_points", "environment")
# This machine's results folder: where the layout's `results/...` paths start.
RESULTS_DIR = "results"


@dataclass
class ResultSet:
    """The tables of one or more results folders; each frame has a `machine` column."""

    runs: pd.DataFrame | None = None
    summary: pd.DataFrame | None = None
    kernels: pd.DataFrame | None = None
    roofline_points: pd.DataFrame | None = None
    environment: pd.DataFrame | None = None
    complexity: list[dict] = field(default_factory=list)
    # One entry per (machine, device): the ceilings JSON with `machine` added.
    ceilings: list[dict] = field(default_factory=list)
    # kind ("summary", "complexity", ...) -> paths read, in reading order.
    sources: dict[str, list[str]] = field(default_factory=dict)

    def add_source(self, kind: str, path: str | os.PathLike) -> None:
        self.sources.setdefault(kind, []).append(os.fspath(path))


@dataclass
class FolderFiles:
    """The files of one results folder that the report reads (None: not there)."""

    results_dir: str
    tables: dict[str, Path | None]
    complexity: list[Path]
    ceilings: list[Path]
    run_jsons: list[Path]


def _relative(kind: str, **keys: str) -> str:
    """A layout path inside a results folder; keys not given match anything (`*`)."""
    keys = {name: keys.get(name, "*") for name in layout.fields(kind)}
    return layout.path(kind, **keys).removeprefix(f"{RESULTS_DIR}/")


def discover(results_dir: str | os.PathLike) -> FolderFiles:
    """The pipeline's files in `results_dir`, where `nnperf.layout` puts them."""
    root = Path(results_dir)
    if not root.is_dir():
        raise NnperfError(
            f"results folder {os.fspath(results_dir)!r} does not exist; give a folder this "
            "pipeline wrote (with tables/, complexity/, ceilings/ inside)"
        )
    tables = {}
    for name in TABLE_NAMES:
        path = root / _relative("table", name=name)
        tables[name] = path if path.is_file() else None
    return FolderFiles(
        results_dir=os.fspath(results_dir),
        tables=tables,
        complexity=sorted(root.glob(_relative("complexity"))),
        ceilings=sorted(root.glob(_relative("ceilings"))),
        run_jsons=sorted(root.glob(_relative("run"))),
    )


def local_files(
    results_dir: str | os.PathLike | None = None,
    tables: Mapping[str, str | os.PathLike | None] | None = None,
    complexity: Iterable[str | os.PathLike] = (),
    ceilings: Iterable[str | os.PathLike] = (),
) -> FolderFiles:
    """This machine's files: those found in `results_dir` (none when None), then the ones
    named (`tables` by TABLE_NAMES; a None entry is not there), each of which must exist."""
    if results_dir is not None:
        folder = discover(results_dir)
    else:
        folder = FolderFiles(RESULTS_DIR, dict.fromkeys(TABLE_NAMES), [], [], [])
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
    return folder


def with_extra_results(
    local: FolderFiles, extra_results: Iterable[str | os.PathLike]
) -> list[FolderFiles]:
    """This machine's files, then every folder of config `report.extra_results`."""
    folders = [local]
    for path in extra_results:
        if not Path(path).is_dir():
            raise NnperfError(
                f"report.extra_results entry {os.fspath(path)!r} is not a folder; give the "
                "results/ folder another machine's run wrote"
            )
        folders.append(discover(path))
    return folders


def figures(folders: Iterable[FolderFiles]) -> list[str]:
    """Every PNG under the `figures/` of each folder, folder by folder."""
    return [
        os.fspath(path)
        for folder in folders
        for path in sorted(Path(folder.results_dir, "figures").glob("**/*.png"))
    ]


def _existing(path: str | os.PathLike, what: str) -> Path:
    if not Path(path).is_file():
        raise NnperfError(f"{what} {os.fspath(path)!r}: file not found")
    return Path(path)


def read_table(path: str | os.PathLike, **options) -> pd.DataFrame:
    """A CSV table, or NnperfError naming the file when it cannot be parsed."""
    try:
        return pd.read_csv(path, **options)
    except FileNotFoundError:
        raise NnperfError(f"{os.fspath(path)}: file not found") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise NnperfError(f"{os.fspath(path)}: not a readable CSV table ({first_line})") from None


def load(folders: list[FolderFiles]) -> ResultSet:
    """Read every folder, label rows with their machine and concatenate folder by folder."""
    environments: dict[str, pd.DataFrame | None] = {}
    raw: dict[str, dict[str, pd.DataFrame | None]] = {}
    result = ResultSet()
    for folder in folders:
        frames = {}
        for name, path in folder.tables.items():
            # The environment is shown as recorded: read as text so that "9.0" (a compute
            # capability) or "13.0" (a CUDA version) do not turn into 9 and 13.
            text = {"dtype": str} if name == "environment" else {}
            frames[name] = read_table(path, **text) if path is not None else None
            if path is not None:
                result.add_source(name, path)
        if frames["environment"] is None and folder.run_jsons:
            frames["environment"] = machines.environment_frame(
                files.read_json(path) for path in folder.run_jsons
            )
            for path in folder.run_jsons:
                result.add_source("environment", path)
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
            key = (document.get("model"), document.get("dataset"), str(document.get("input_shape")))
            if key not in seen_models:
                seen_models.add(key)
                result.complexity.append(document)
        for path in folder.ceilings:
            document = files.read_json(path)
            result.add_source("ceilings", path)
            labelled = machines.attach_machine(
                pd.DataFrame([{"device": document.get("device")}]), mapping, folder.results_dir
            )
            result.ceilings.append({**document, "machine": labelled["machine"].iloc[0]})
    return result


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
            "it is written by rule environment_table (nnperf.machines.write_environment_table)"
        )
    return machines.attach_machine(frame, mapping, results_dir)
