"""`nnperf ncu-kernels`: raw-page ncu CSV exports -> the per-kernel table (kernels.csv).

Each `--profile CSV META` pairs an export (`ncu-command export`) with what says which
configuration it profiled: its meta `.ncu.json` (`ncu-command profile --request`; it also
holds the architecture and clock control) or the ProfileStepRequest JSON it ran.
"""

from __future__ import annotations

import argparse

from nnperf.ncu.metrics import ARCHITECTURES


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "ncu-kernels", help="ncu exports -> kernels.csv", description=__doc__
    )
    parser.add_argument(
        "--profile",
        nargs=2,
        action="append",
        default=[],
        metavar=("CSV", "META"),
        help="a raw-page export and its meta .ncu.json (or request JSON); repeatable",
    )
    parser.add_argument("--output", required=True, help="kernels table to write")
    parser.add_argument(
        "--arch",
        choices=ARCHITECTURES,
        help="GPU architecture of exports whose meta does not name one and that have no CC "
        "column (raw pages of Nsight Compute before 2021)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from nnperf.ncu.kernels import write_table

    write_table(args.profile, args.output, arch=args.arch)
    return 0
