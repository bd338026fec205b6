"""`nnperf gpu-study`: run a study stage by stage, timing each, and keep its report as an example.

Each stage is one `snakemake --until <its rules>` call (data, complexity and ceilings; timed
runs; ncu profiles; operator profiles; training; tables, figures and the summary report),
then `snakemake --report reports/report.html` (`nnperf.study.stages`). The summary, its tables
and the measured ceilings are then copied into --dest (no .ncu-rep), with stage_times.csv and
a README.md holding the stage times, the machine, the commit and the date. A failing stage
stops the run with one line naming it; earlier stages' results stay in results/.

`make gpu-study` runs `nnperf doctor` first, then this with config/gpu.yaml on synthetic data
of CIFAR-10's size; with --configfile tests/configs/tiny.yaml it rehearses on a CPU.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from nnperf.commands import add_study_flags
from nnperf.study import loading as study
from nnperf.study import stages as study_run


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "gpu-study",
        help="run a study stage by stage with wall times, and keep its report as an example",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_study_flags(parser, default_configfile="config/gpu.yaml")
    parser.add_argument(
        "--dest",
        required=True,
        type=Path,
        help="example folder to write (replaced), e.g. reports/examples/h100-gpu-study",
    )
    parser.add_argument("--cores", default="all", help="snakemake --cores (default: all)")
    parser.add_argument(
        "--directory",
        type=Path,
        default=Path("."),
        help="folder the study runs in, as snakemake --directory (default: here)",
    )
    parser.add_argument(
        "--snakefile", type=Path, default=study.REPO / "Snakefile", help="as snakemake --snakefile"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    configfiles = args.configfile or ["config/gpu.yaml"]
    # Read first: a study file that does not load fails here, before any stage runs.
    loaded = study.load_study(configfiles, args.config, base=study.default_config(args.directory))
    times = study_run.run_stages(
        configfiles,
        args.config,
        cores=args.cores,
        snakefile=args.snakefile,
        workdir=args.directory,
    )
    files = study_run.write_example(loaded, times, args.dest, args.config, workdir=args.directory)
    total = sum(t.wall_time_s for t in times)
    print(
        f"gpu-study: {len(times)} stages in {total / 60:.1f} min; {len(files)} files in {args.dest}"
    )
    return 0
