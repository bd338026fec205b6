"""`nnperf gpu-study`: run a study stage by stage, timing each, and keep its report as an example.

Each stage is one `snakemake --until <its rules>` call (data, complexity and ceilings; timed
runs; ncu profiles; operator profiles; training; tables, figures and the summary report),
then `snakemake --report reports/report.html` (`nnperf.study.stages`). The summary, its tables
and the measured ceilings are then copied into --dest (no .ncu-rep), with stage_times.csv and
a README.md holding the stage times, the machine, the commit and the date. A failing stage
stops the run with one line naming it; earlier stages' results stay in results/.

It first runs `nnperf doctor`'s checks for the study, once, timed as the stage `preflight`,
and tells its Snakemake calls so (`nnperf.study.session.PREFLIGHT_DONE_ENV`): their onstart
handlers would otherwise import torch, start CUDA and probe ncu again in every stage.
`make gpu-study` runs this with config/gpu.yaml on synthetic data of CIFAR-10's size.

--check is the short check of every CUDA path that `make gpu-check` runs in the minutes a lent
GPU machine gives: config/gpu-check.yaml (any --configfile goes on top of it), its example in
reports/examples/h100-gpu-check unless --dest says otherwise.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from nnperf.commands import add_study_flags, doctor
from nnperf.core.errors import NnperfError
from nnperf.study import loading
from nnperf.study import preflight, session
from nnperf.study import stages as study_run

STUDY_CONFIG = "config/gpu.yaml"
CHECK_CONFIG = "config/gpu-check.yaml"
CHECK_DEST = "reports/examples/h100-gpu-check"


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "gpu-study",
        help="run a study stage by stage with wall times, and keep its report as an example",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_study_flags(parser, default_configfile=f"{STUDY_CONFIG} ({CHECK_CONFIG} with --check)")
    parser.add_argument(
        "--check",
        action="store_true",
        help=f"the check of every CUDA path: {CHECK_CONFIG} under any --configfile, "
        f"--dest {CHECK_DEST} by default",
    )
    parser.add_argument(
        "--dest",
        type=Path,
        help="example folder to write (replaced), e.g. reports/examples/h100-gpu-study; "
        f"required without --check (default with it: {CHECK_DEST})",
    )
    parser.add_argument("--cores", default="all", help="snakemake --cores (default: all)")
    parser.add_argument(
        "--directory",
        type=Path,
        default=Path("."),
        help="folder the study runs in, as snakemake --directory (default: here)",
    )
    parser.add_argument(
        "--snakefile",
        type=Path,
        default=loading.REPO / "Snakefile",
        help="as snakemake --snakefile",
    )
    parser.set_defaults(func=run)


def study_files(args: argparse.Namespace) -> tuple[list[str], Path]:
    """The study files and the example folder that the flags ask for."""
    if args.check:
        # The one here (Snakemake reads --configfile from here), else this checkout's.
        check = CHECK_CONFIG if Path(CHECK_CONFIG).is_file() else str(loading.REPO / CHECK_CONFIG)
        return [check, *args.configfile], args.dest or Path(CHECK_DEST)
    if args.dest is None:
        raise NnperfError(
            "gpu-study needs --dest (the example folder to write), e.g. --dest "
            "reports/examples/h100-gpu-study; or --check, whose default is " + CHECK_DEST
        )
    return args.configfile or [STUDY_CONFIG], args.dest


def run(args: argparse.Namespace) -> int:
    configfiles, dest = study_files(args)
    # Read first: a study file that does not load fails here, before any stage runs.
    loaded = loading.load_study(
        configfiles, args.config, base=loading.default_config(args.directory)
    )
    # The doctor's checks once, timed as a stage of their own; the stages' Snakemake calls
    # are told so and skip their onstart preflight (torch, CUDA, the ncu probe: 15-30 s each).
    started = time.monotonic()
    needs = doctor.check_study(loaded)
    checked = [
        study_run.StageTime("preflight", "nnperf doctor's checks", time.monotonic() - started)
    ]
    environ = dict(os.environ)
    if needs.cuda:
        environ[session.PREFLIGHT_DONE_ENV] = session.preflight_done_value(
            needs.ncu != preflight.NCU_NO
        )
    times = checked + study_run.run_stages(
        configfiles,
        args.config,
        cores=args.cores,
        snakefile=args.snakefile,
        workdir=args.directory,
        environ=environ,
    )
    files = study_run.write_example(
        loaded, times, dest, args.config, workdir=args.directory, check=args.check
    )
    total = sum(t.wall_time_s for t in times)
    print(f"gpu-study: {len(times)} stages in {total / 60:.1f} min; {len(files)} files in {dest}")
    return 0
