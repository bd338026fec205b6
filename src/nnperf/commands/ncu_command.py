"""`nnperf ncu-command {profile,export}`: run Nsight Compute the way the roofline needs.

`profile` runs a command under `ncu` with the metric set of the GPU's architecture,
NVTX-filtered to the marked step and calibration GEMM, and writes the `.ncu-rep` and its meta
`.ncu.json` (command line, settings, ncu version, wall time). With `--request FILE` the command
is `nnperf step --request FILE` and the meta records the request's configuration keys (rule
`ncu_profile`). `export` writes the raw-page CSV of a report once it parses (rule `ncu_export`).
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
from pathlib import Path

from nnperf.commands import add_fields, field_values
from nnperf.core import machinelock
from nnperf.core.contract import ProfileStepRequest, from_dict, read_request
from nnperf.core.errors import NnperfError
from nnperf.ncu import command
from nnperf.ncu import metrics

HELP = {
    "arch": f"metric set: auto (the GPU's), one of {', '.join(metrics.ARCHITECTURES)}, or a compute "
    "capability such as 9.0",
    "clock_control": "ncu --clock-control: base locks clocks (repeatable counters), none boosts",
    "replay_mode": "ncu --replay-mode",
    "cache_control": "ncu --cache-control: all flushes caches between replay passes",
    "ncu": "ncu executable (on PATH or a path)",
}
CHOICES = {
    "clock_control": metrics.CLOCK_CONTROLS,
    "replay_mode": metrics.REPLAY_MODES,
    "cache_control": metrics.CACHE_CONTROLS,
}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "ncu-command",
        help="profile a step under Nsight Compute, or export a report",
        description=__doc__,
    )
    modes = parser.add_subparsers(dest="mode", metavar="MODE", required=True)
    profile = modes.add_parser("profile", help="run a training step (or a command) under ncu")
    profile.add_argument("--report", required=True, type=Path, help="report to write (.ncu-rep)")
    profile.add_argument(
        "--meta", type=Path, help="meta JSON to write (default: <report>.ncu.json)"
    )
    profile.add_argument(
        "--request",
        type=Path,
        help="ProfileStepRequest JSON: profile `nnperf step --request FILE` under this "
        "interpreter, and record the request's keys in the meta",
    )
    add_fields(profile, command.NcuOptions, HELP, CHOICES)
    export = modes.add_parser("export", help="write the raw-page CSV of a report")
    export.add_argument("--report", required=True, type=Path, help="input report (.ncu-rep)")
    export.add_argument("--csv", required=True, type=Path, help="output CSV (raw page)")
    add_fields(export, command.NcuOptions, {"ncu": HELP["ncu"]})
    for mode in (profile, export):
        mode.add_argument("--dry-run", action="store_true", help="print the ncu command only")
    profile.add_argument("target", nargs=argparse.REMAINDER, help="or: the command, after '--'")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.mode == "export":
        argv = command.export_to_csv(args.report, args.csv, args.ncu, args.dry_run)
    else:
        target = args.target[1:] if args.target[:1] == ["--"] else args.target
        request = read_request(ProfileStepRequest, args.request) if args.request else None
        if request and target:
            raise NnperfError("give --request or a command after '--', not both")
        options = from_dict(command.NcuOptions, field_values(args, command.NcuOptions))
        target = command.step_target(args.request) if request else target
        # The ncu_profile job's body: one measurement at a time on the machine.
        with contextlib.nullcontext() if args.dry_run else machinelock.measuring("ncu_profile"):
            argv = command.profile_to_files(
                target, args.report, args.meta, options, request, args.dry_run
            )
    if args.dry_run:
        print(shlex.join(argv))
    return 0
