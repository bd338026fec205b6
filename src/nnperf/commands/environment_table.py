"""`nnperf environment-table`: the environment record of every run as one table.

Reads run JSONs (`results/runs/.../rep{rep}.json`) and writes
`results/tables/environment.csv`: one row per run with its keys, status, the `machine` label
(device name and host name) and every field of its `environment` record, flattened. The
report reads it to tell machines apart and to print the environment table.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from nnperf import files, machines
from nnperf.errors import NnperfError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "environment-table",
        help="Collect the environment records of run JSONs into one CSV.",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--runs",
        nargs="*",
        default=[],
        metavar="JSON",
        help="run JSON files (rep{rep}.json) to read",
    )
    parser.add_argument(
        "--runs-dir",
        default=None,
        metavar="DIR",
        help="also read every run JSON under DIR (the results/runs/ layout)",
    )
    parser.add_argument(
        "--out",
        required=True,
        metavar="CSV",
        help="where to write the table (results/tables/environment.csv)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    paths = [Path(p) for p in args.runs]
    if args.runs_dir is not None:
        root = Path(args.runs_dir)
        if not root.is_dir():
            raise NnperfError(f"--runs-dir {args.runs_dir!r} is not a folder; give results/runs")
        paths += sorted(root.glob("*/*/*/bs*/*/rep*.json"))
    if not paths:
        raise NnperfError("environment-table: no run JSON files given; use --runs or --runs-dir")
    frame = machines.environment_frame(files.read_json(path) for path in paths)
    files.write_csv(args.out, frame)
    print(
        f"environment-table: {len(frame)} runs on {frame['machine'].nunique()} machine(s) "
        f"-> {args.out}"
    )
    return 0
