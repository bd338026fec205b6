"""The roofline stage's tables on disk: kernels and timings in, roofline points and profiles out.

`write_points` is the edge of rule `roofline_points`: it reads kernels.csv (`nnperf.ncu.kernels`),
summary.csv and the complexity JSONs, builds the points and the per-profile checks with the
pure functions of `nnperf.roofline.points`, and writes `roofline_points.csv` and `profiles.csv`.
`read_kernels` and `read_points` read those tables back with their text columns as text, for
the figures (`nnperf.report.plots.roofline`). Every reader checks the columns it needs and
fails with one line naming the file.
"""

from __future__ import annotations

import os
from typing import Iterable, Sequence

import pandas as pd

from nnperf.core import files
from nnperf.core.errors import NnperfError
from nnperf.core.vocab import CONFIG_KEYS
from nnperf.ncu.kernels import KERNEL_COLUMNS
from nnperf.roofline.points import (
    POINT_COLUMNS,
    analytic_points,
    ncu_points,
    profiles_table,
    step_times,
)

KERNEL_TEXT_COLUMNS = (
    "device",
    "model",
    "precision",
    "variant",
    "kernel_name",
    "kind",
    "phase",
    "arch",
    "cc",
    "clock_control",
)
POINT_TEXT_COLUMNS = (
    "device",
    "model",
    "precision",
    "variant",
    "source",
    "granularity",
    "kernel_name",
    "kind",
    "memory_level",
)
SUMMARY_COLUMNS = (*CONFIG_KEYS, "step_time_s_median")


def read_kernels(path: str | os.PathLike | None) -> pd.DataFrame:
    """kernels.csv (`nnperf.ncu.kernels`), or an empty table when no profile was taken (None)."""
    if path is None:
        return pd.DataFrame(columns=list(KERNEL_COLUMNS))
    return _read(path, "kernels", KERNEL_COLUMNS, KERNEL_TEXT_COLUMNS)


def read_points(path: str | os.PathLike) -> pd.DataFrame:
    """roofline_points.csv, text columns as text (an empty kernel name stays '')."""
    frame = _read(path, "roofline points", POINT_COLUMNS, POINT_TEXT_COLUMNS)
    for column in POINT_TEXT_COLUMNS:
        frame[column] = frame[column].fillna("")
    return frame


def read_complexities(paths: Iterable[str | os.PathLike]) -> dict[str, dict]:
    """Complexity JSONs keyed by the model each names."""
    documents = {}
    for path in paths:
        document = files.read_json(path)
        if "model" not in document:
            raise NnperfError(f"{os.fspath(path)}: complexity JSON has no 'model' key")
        documents[document["model"]] = document
    return documents


def _read(
    path: str | os.PathLike, what: str, columns: Sequence[str], text: Sequence[str]
) -> pd.DataFrame:
    needed_by = f"the roofline, reading the {what} table"
    return files.read_table(path, columns, needed_by, dtype={c: str for c in text})


def write_points(
    summary: str | os.PathLike,
    complexity: Iterable[str | os.PathLike],
    kernels: str | os.PathLike | None,
    out_points: str | os.PathLike,
    out_profiles: str | os.PathLike,
) -> pd.DataFrame:
    """Every roofline point of a study, and one row per profiled configuration (rule
    `roofline_points`).

    Analytic points come from summary.csv's median step times and the complexity JSONs; ncu
    points, the calibration checks, the FLOPs comparison and the GPU's busy share
    (`profiles_table`) from kernels.csv when configurations were profiled (None otherwise:
    profiles.csv is then the header alone). Returns the points written.
    """
    table = _read(summary, "summary", SUMMARY_COLUMNS, ("device", "model", "precision", "variant"))
    profile = read_kernels(kernels)
    parts = [
        frame
        for frame in (
            ncu_points(profile),
            analytic_points(read_complexities(complexity), step_times(table)),
        )
        if not frame.empty
    ]
    points = (
        pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(POINT_COLUMNS))
    )
    files.write_csv(out_points, points)
    files.write_csv(out_profiles, profiles_table(profile, points, table))
    return points
