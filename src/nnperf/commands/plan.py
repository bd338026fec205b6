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
from nnperf.study import estimate_sources, plan, plan_text


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
        "-v",
        "--per-job",
        action="store_true",
        help="list every job's estimate and what it is made of under its stage",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from nnperf.core.devices import detect_best_device
    from nnperf.ncu.command import find_ncu
    from nnperf.study.loading import load_study

    if args.timings in estimate_sources.MACHINES:
        # Planning for that machine: `auto` is its device.
        device = estimate_sources.MACHINES[args.timings].device
        detect = lambda: device  # noqa: E731
    else:
        detect = detect_best_device
    study = load_study(args.configfile, args.config, detect=detect)
    timings = estimate_sources.timings_from(args.timings, study.devices)
    # `ncu.enabled: auto` looks for ncu on the machine that builds the DAG: a GPU study is
    # planned for its GPU machine, which has it.
    ncu_on_path = find_ncu() is not None or timings.machine.device == "cuda"
    estimate = plan.plan_study(study, timings, ncu_on_path=ncu_on_path)
    print(plan_text.render(estimate, per_job=args.per_job), end="")
    return 0
