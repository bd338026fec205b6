"""`nnperf ncu-kernels`: raw-page ncu CSVs -> `results/tables/kernels.csv`.

Each input must sit at `.../{device}/{model}/{precision}/bs{batch_size}/{variant}.csv` (the
config keys come from the path). The sidecar `{variant}.ncu.json` written by
`nnperf ncu-command profile`, when present, supplies the architecture and clock control.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from nnperf import kernels, ncu
from nnperf.errors import NnperfError
from nnperf.files import read_json, write_csv


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "ncu-kernels",
        help="turn raw ncu CSV exports into the per-kernel table",
        description=__doc__,
    )
    parser.add_argument(
        "csvs",
        nargs="*",
        type=Path,
        help="raw-page exports at .../{device}/{model}/{precision}/bs{B}/{variant}.csv",
    )
    parser.add_argument(
        "--output",
        required=True,
        type=Path,
        help="kernels table to write (results/tables/kernels.csv)",
    )
    parser.set_defaults(func=run)


def sidecar_path(csv_path: Path) -> Path:
    """`{variant}.csv` -> `{variant}.ncu.json` (written by `ncu-command profile`)."""
    return csv_path.with_name(csv_path.stem + ".ncu.json")


def table_for(csv_path: Path) -> pd.DataFrame:
    config = kernels.config_from_profile_path(csv_path)
    meta_path = sidecar_path(csv_path)
    meta = read_json(meta_path) if meta_path.exists() else {}
    arch = meta.get("arch")
    if arch is not None and arch not in ncu.ARCHITECTURES:
        raise NnperfError(
            f"{meta_path}: arch {arch!r} is unknown; allowed: {', '.join(ncu.ARCHITECTURES)}"
        )
    if arch is None:
        first = ncu.read_raw_csv(csv_path)
        arch = kernels.arch_of_export(first) if not first.empty else None
    # With the set's metrics required, a missing column or a bad value names its file and line.
    required = ncu.metric_set(arch).metrics() if arch is not None else ()
    raw = ncu.read_raw_csv(csv_path, required=required)
    return kernels.kernels_table(
        raw, config, arch=arch, clock_control=meta.get("clock_control", "unknown")
    )


def run(args) -> int:
    tables = [table_for(path) for path in args.csvs]
    frame = (
        pd.concat(tables, ignore_index=True)
        if tables
        else pd.DataFrame(columns=list(kernels.KERNEL_COLUMNS))
    )
    write_csv(args.output, frame)
    return 0
