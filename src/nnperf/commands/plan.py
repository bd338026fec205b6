"""`nnperf plan`: a study's jobs and their estimated cost, stage by stage, before it runs.

The study is loaded as the workflow loads it: config/config.yaml, each --configfile merged
over it in order, then the --config KEY=VALUE pairs (Snakemake's own parsing and merging),
validated against the schema. Each stage's line gives its job count, its estimated minutes
and where the numbers come from; --per-job lists every job's estimate and its parts
(`nnperf.study.plan` has the model, docs/plan.md the sources).
"""

from __future__ import annotations

import argparse

from nnperf.commands import add_study_flags
from nnperf.study import plan, plan_text


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="estimate a study's jobs and their cost per stage, before it runs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_study_flags(parser)
    parser.add_argument(
        "--timings",
        metavar="h100|cpu|RESULTS_DIR",
        help="where the estimates come from: h100 (an NVIDIA H100's recorded timings), cpu (a "
        "2-core CPU's), or the results folder of an earlier study on the machine the study "
        "will run on (its measurements where it has the configuration, the machine kind's "
        "defaults elsewhere); default: h100 when the study's devices include cuda, else cpu",
    )
    parser.add_argument(
        "--stages",
        action="store_true",
        help="price the snakemake calls as `nnperf gpu-study` makes them (one per stage, each "
        "with its own start and CUDA preflight, then `snakemake --report`); default: one "
        "`snakemake` call",
    )
    parser.add_argument(
        "--cores",
        type=int,
        metavar="N",
        help="cores for the wall-time line (the jobs that do not measure run N at a time); "
        "default: the timings machine's",
    )
    parser.add_argument(
        "-v",
        "--per-job",
        action="store_true",
        help="list every job's estimate and what it is made of under its stage",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from nnperf.core.errors import NnperfError

    if args.cores is not None and args.cores < 1:
        raise NnperfError(f"--cores is {args.cores}; expected an integer >= 1")
    estimate = plan.planned(args.configfile, args.config, args.timings, stages=args.stages)
    print(plan_text.render(estimate, per_job=args.per_job, cores=args.cores), end="")
    return 0
