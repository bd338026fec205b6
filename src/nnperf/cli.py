"""The `nnperf` command: one verb per stage of the pipeline.

Each verb lives in `nnperf.commands.<name>` with `register(subparsers)`, which adds its
parser and sets `func`. This module only wires them together and turns `NnperfError` into
one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from nnperf import __version__
from nnperf.errors import NnperfError

COMMAND_MODULES = (
    "ceilings",
    "plot_ceilings",
    "prepare_dataset",
    "complexity",
    "ncu_command",
    "ncu_kernels",
    "roofline_points",
    "plot_roofline",
    "run",
    "step",
    "aggregate_runs",
    "plot_runs",
    "environment_table",
    "render_report",
    "compare_machines",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nnperf",
        description="Measure how fast deep networks train on this machine, and why.",
    )
    parser.add_argument("--version", action="version", version=f"nnperf {__version__}")
    subparsers = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"nnperf.commands.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except NnperfError as exc:
        print(f"nnperf {args.verb}: error: {exc}", file=sys.stderr)
        return 2
