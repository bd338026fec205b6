"""`nnperf plan`: a study's jobs and their estimated cost, stage by stage, before it runs.

The study is loaded as the workflow loads it: config/config.yaml, each --configfile merged
over it in order, then the --config KEY=VALUE pairs (Snakemake's own parsing and merging),
validated against the schema. Each stage's line gives its job count, its estimated minutes
and where the numbers come from; --per-job lists every job's estimate and its parts
(`nnperf.plan` has the model, docs/plan.md the sources).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from nnperf import config as study_config
from nnperf import contract, plan

BASE_CONFIG = Path("config/config.yaml")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="estimate a study's jobs and their cost per stage, before it runs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--configfile",
        nargs="+",
        action="extend",
        default=[],
        metavar="FILE",
        help="study files merged over config/config.yaml in order, as snakemake --configfile",
    )
    parser.add_argument(
        "--config",
        nargs="+",
        action="extend",
        default=[],
        metavar="KEY=VALUE",
        help="config values set last, as snakemake --config",
    )
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


def load_study(configfiles: list[str], entries: list[str], base: Path = BASE_CONFIG):
    """The validated config and its typed study, as the workflow reads them: `base`
    (config/config.yaml here, else the checkout's), every --configfile, then the --config
    pairs parsed as Snakemake parses them."""
    from snakemake.cli import parse_config

    if not base.is_file():
        base = study_config.DEFAULT_CONFIG_PATH
    config = study_config.load_study(configfiles, parse_config(entries), base)
    return config, contract.from_dict(contract.StudyConfig, config)


def run(args: argparse.Namespace) -> int:
    from nnperf.devices import detect_best_device

    config, study = load_study(args.configfile, args.config)
    if args.timings in plan.MACHINES:
        # Planning for that machine: `auto` is its device.
        detect = lambda: plan.MACHINES[args.timings].device  # noqa: E731
    else:
        detect = detect_best_device
    timings = plan.timings_from(args.timings, study_config.resolved_devices(config, detect))
    # `ncu.enabled: auto` looks for ncu on the machine that builds the DAG: a GPU study is
    # planned for its GPU machine, which has it.
    ncu_on_path = shutil.which("ncu") is not None or timings.machine.device == "cuda"
    estimate = plan.plan_study(study, timings, ncu_on_path=ncu_on_path, detect=detect)
    print(plan.render(estimate, per_job=args.per_job), end="")
    return 0
