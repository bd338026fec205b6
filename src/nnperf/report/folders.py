"""The files of a `results/` folder (this machine's or another's) that the report reads. No
pandas here: the workflow calls this module while it builds the DAG (`extra_results_inputs`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from nnperf.core import layout
from nnperf.core.errors import NnperfError
from nnperf.core.vocab import CONFIG_KEYS, DATASET_KEY_PATTERN, DATASETS

# summary.csv's headline: the mean of the worker processes' throughputs, the number its CI is
# for (`throughput_img_s_median` is over windows: a spread statistic, not the estimate).
HEADLINE = ("throughput_img_s_mean", "throughput_img_s_ci95_low", "throughput_img_s_ci95_high")
# Per table: the rule that writes it, and what the report reads of it without a fallback
# (the keys, the headline numbers). A table without one of them (edited by hand, or cut)
# stops the report with one line instead of blank cells; later columns are not required,
# so an older machine's folder still reads.
TABLES = {
    "runs": ("aggregate_runs", (*CONFIG_KEYS, "process", "status", "throughput_img_s")),
    "windows": ("aggregate_runs", (*CONFIG_KEYS, "process", "window")),
    "summary": (
        "aggregate_runs",
        (*CONFIG_KEYS, "status", "n_processes", "n_windows", *HEADLINE, "ci_half_width_rel"),
    ),
    "kernels": ("ncu_kernels", (*CONFIG_KEYS, "kernel_name", "duration_s")),
    "roofline_points": (
        "roofline_points",
        (*CONFIG_KEYS, "granularity", "flops", "bytes", "time_s"),
    ),
    "profiles": ("roofline_points", CONFIG_KEYS),
    "training": ("training_table", (*CONFIG_KEYS, "recipe", "status")),
    "environment": ("environment_table", ("device",)),
    "comparisons": ("comparisons_table", ("kind", "pair", "ratio", "verdict")),
    "machines_summary": ("compare_machines", ()),
}
# The tables a results folder holds (the merged machines' summary is not read back).
TABLE_NAMES = tuple(name for name in TABLES if name != "machines_summary")
# This machine's results folder: where the layout's `results/...` paths start.
RESULTS_DIR = "results"


def opprofile_table_paths(document: str | os.PathLike) -> dict[str, Path]:
    """The tables beside an operator profile's document (`x.json` -> `x_operators.csv`...),
    where the layout kinds `opprofile_<name>` put them."""
    stem = layout.TEMPLATES["opprofile"].removesuffix(".json")
    text = os.fspath(document).removesuffix(".json")
    names = ("operators", "layers", "steps", "memory")
    return {n: Path(text + layout.TEMPLATES[f"opprofile_{n}"].removeprefix(stem)) for n in names}


@dataclass
class FolderFiles:
    """The files of one results folder that the report reads (None: not there)."""

    results_dir: str
    # The study's dataset (None: unknown, when only files were named).
    dataset: str | None = None
    tables: dict[str, Path | None] = field(default_factory=lambda: dict.fromkeys(TABLE_NAMES))
    complexity: list[Path] = field(default_factory=list)
    ceilings: list[Path] = field(default_factory=list)
    run_jsons: list[Path] = field(default_factory=list)
    # Operator profiles' documents (their tables sit beside them).
    opprofiles: list[Path] = field(default_factory=list)


def _relative(kind: str, **keys: str) -> str:
    """A layout path inside a results folder; keys not given match anything (`*`)."""
    keys = {name: keys.get(name, "*") for name in layout.fields(kind)}
    return layout.path(kind, **keys).removeprefix(f"{RESULTS_DIR}/")


def _files(root: Path, kind: str, **keys: str) -> list[Path]:
    """The files of `kind` in `root` whose keys fit their patterns (a glob's wildcard also
    matches a group's folder)."""
    found = sorted(root.glob(_relative(kind, **keys)))
    return [p for p in found if layout.matches(kind, f"{RESULTS_DIR}/{p.relative_to(root)}")]


def datasets_in(results_dir: str | os.PathLike) -> list[str]:
    paths = [p for stage in ("tables", "runs") for p in Path(results_dir, stage).glob("*")]
    names = {p.name for p in paths if p.is_dir()}
    return sorted(n for n in names if re.fullmatch(DATASET_KEY_PATTERN, n))


def discover(results_dir: str | os.PathLike, dataset: str | None = None) -> FolderFiles:
    """The files in `results_dir` of the study of `dataset` (None: the folder's only one)."""
    root, name = Path(results_dir), os.fspath(results_dir)
    if not root.is_dir():
        raise NnperfError(
            f"results folder {name!r} does not exist; give a folder this "
            "pipeline wrote (with tables/, complexity/, ceilings/ inside)"
        )
    present = datasets_in(root)
    if dataset is None and len(present) > 1:
        raise NnperfError(
            f"results folder {name!r} holds studies of several datasets "
            f"({', '.join(present)}); choose one with --dataset"
        )
    if dataset is not None and not re.fullmatch(DATASET_KEY_PATTERN, dataset):
        raise NnperfError(
            f"dataset {dataset!r} is not a dataset's name; allowed: {', '.join(DATASETS)} or an "
            "ImageFolder's label"
        )
    dataset = dataset or (present[0] if present else None)
    folder = FolderFiles(name, dataset, ceilings=_files(root, "ceilings"))
    if dataset is not None:
        for table in TABLE_NAMES:
            path = root / _relative("table", dataset=dataset, name=table)
            folder.tables[table] = path if path.is_file() else None
        folder.complexity = _files(root, "complexity", dataset=dataset)
        folder.run_jsons = _files(root, "run", dataset=dataset)
        folder.opprofiles = _files(root, "opprofile", dataset=dataset)
    return folder


def local_files(
    results_dir: str | os.PathLike | None = None,
    tables: Mapping[str, str | os.PathLike | None] | None = None,
    complexity: Iterable[str | os.PathLike] = (),
    ceilings: Iterable[str | os.PathLike] = (),
    run_jsons: Iterable[str | os.PathLike] = (),
    dataset: str | None = None,
    opprofiles: Iterable[str | os.PathLike] = (),
) -> FolderFiles:
    """This machine's files of the study of `dataset`: those found in `results_dir`, then the
    ones named (a None table is not there), each of which must exist."""
    folder = FolderFiles(RESULTS_DIR, dataset)
    if results_dir is not None:
        folder = discover(results_dir, dataset)
    for name, path in (tables or {}).items():
        if name not in TABLE_NAMES:
            raise NnperfError(f"table {name!r} is not read; allowed: {', '.join(TABLE_NAMES)}")
        if path is not None:
            folder.tables[name] = _existing(path, f"{name} table")
    for name, paths, what in (
        ("complexity", complexity, "complexity"),
        ("ceilings", ceilings, "ceilings"),
        ("run_jsons", run_jsons, "run JSON"),
        ("opprofiles", opprofiles, "operator profile"),
    ):
        added = [_existing(path, what) for path in paths]
        setattr(folder, name, list(dict.fromkeys([*getattr(folder, name), *added])))
    return folder


def with_extra_results(
    local: FolderFiles, extra_results: Iterable[str | os.PathLike]
) -> list[FolderFiles]:
    """This machine's files, then each `report.extra_results` folder's, of the same dataset."""
    return [local, *(extra_folder(path, local.dataset) for path in extra_results)]


def extra_folder(path: str | os.PathLike, dataset: str | None) -> FolderFiles:
    """The files of one `report.extra_results` folder for the study of `dataset`; one without
    them is an error (read as it is, it would count silently as a machine without results)."""
    where = f"report.extra_results entry {os.fspath(path)!r}"
    allowed = "give the results/ folder another machine's run wrote"
    if not Path(path).is_dir():
        raise NnperfError(f"{where} is not a folder; {allowed}")
    present = datasets_in(path)
    if not present:
        inner = Path(path, RESULTS_DIR)
        hint = f" (did you mean {os.fspath(inner)!r}?)" if datasets_in(inner) else ""
        raise NnperfError(
            f"{where} is not a results folder: no tables/ or runs/ of any dataset in it{hint}; "
            f"{allowed}"
        )
    if dataset is not None and dataset not in present:
        raise NnperfError(
            f"{where} has no results of dataset {dataset!r} (it has: {', '.join(present)}); "
            "machines are compared on the same data only"
        )
    folder = discover(path, dataset)
    if not any(folder.tables.values()) and not folder.run_jsons:
        raise NnperfError(
            f"{where} has no tables or run JSONs of dataset {folder.dataset!r}; {allowed}"
        )
    return folder


def extra_results_inputs(extra_results: Iterable[str | os.PathLike], dataset: str) -> list[str]:
    """Every file of the `report.extra_results` folders the report reads, as Snakemake inputs:
    a folder's time does not change when a file inside does, so editing another machine's
    summary.csv re-runs what reads it only through its files. A bad folder fails the DAG."""
    paths = []
    for folder in (extra_folder(entry, dataset) for entry in extra_results):
        paths += [path for path in folder.tables.values() if path is not None]
        paths += [*folder.complexity, *folder.ceilings, *folder.run_jsons]
        for document in folder.opprofiles:
            tables = opprofile_table_paths(document).values()
            paths += [document, *(table for table in tables if table.is_file())]
    return [os.fspath(path) for path in paths]


def figures(folders: Iterable[FolderFiles]) -> list[str]:
    """Every PNG under each folder's `figures/`, except those of another dataset's study."""
    return [
        os.fspath(path)
        for folder in folders
        for path in sorted(Path(folder.results_dir, "figures").glob("**/*.png"))
        if not (set(DATASETS) | set(datasets_in(folder.results_dir))) - {folder.dataset}
        & set(path.relative_to(folder.results_dir).parts)
    ]


def _existing(path: str | os.PathLike, what: str) -> Path:
    if not Path(path).is_file():
        raise NnperfError(f"{what} {os.fspath(path)!r}: file not found")
    return Path(path)
