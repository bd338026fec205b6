"""`nnperf doctor`: does this machine have what a study needs below torch?

Checks torch's CUDA build against the driver, that torch sees a CUDA device, `ncu` and its
permission to read the GPU's performance counters (a one-kernel profile) and NVML
(`nnperf.study.preflight`), for the study of config/config.yaml and the given --configfile files,
read as the workflow reads them. One line per check; a missing need of the study carries its
fix, and the exit status is then 2. A missing NVML is a warning with its fix (the timed
windows' clocks go unrecorded; the study runs), and the exit status stays 0. A study without
`cuda` in its devices does not need the CUDA checks: their lines say so, and they do not fail it.
"""

from __future__ import annotations

import argparse
import json

from nnperf.commands import add_study_flags
from nnperf.core.errors import NnperfError
from nnperf.study import preflight
from nnperf.study import loading


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="check the driver, CUDA build, ncu and its counters and NVML for a study",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_study_flags(parser)
    parser.add_argument(
        "--json", action="store_true", help="print the checks as a JSON list instead of lines"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    loaded = loading.load_study(args.configfile, args.config)
    check_study(loaded, as_json=args.json)
    return 0


def check_study(loaded: loading.Study, as_json: bool = False) -> preflight.Needs:
    """Print one line per check of what `loaded` needs of this machine (a JSON list with
    `as_json`); NnperfError when a need is missing. Returns the needs that were checked, which
    `nnperf gpu-study` hands on to its Snakemake calls so they do not check them again."""
    needs = preflight.needs_of(loaded.devices, loaded.typed.ncu.enabled)
    checks = preflight.run_checks(needs)
    if as_json:
        print(json.dumps([check.as_dict() for check in checks], indent=2))
    else:
        for check in checks:
            print(check.line())
    failing = preflight.problems(checks)
    if failing:
        names = ", ".join(check.name for check in failing)
        raise NnperfError(
            f"this machine lacks what {loaded.name} needs ({names}): see the doctor lines above"
        )
    if not as_json:
        warned = ", ".join(check.name for check in preflight.warnings(checks))
        without = f" (with warnings: {warned})" if warned else ""
        print(f"doctor: ready: this machine has what {loaded.name} needs{without}")
    return needs
