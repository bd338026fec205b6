"""The `nnperf` command: the verbs a person uses by hand.

The workflow's jobs call the library through `workflow/scripts/` with typed requests
(`nnperf.core.contract`); these verbs are thin over the same requests: one timed run, the step
profiled under ncu, an ncu command or export, and rendering or comparing reports.

Each verb lives in `nnperf.commands.<name>` with `register(subparsers)`, which adds its
parser and sets `func`. This module only wires them together and turns `NnperfError` into
one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from nnperf import __version__
from nnperf.core.errors import NnperfError

# As `nnperf --help` lists them. The verb is the module name with
# hyphens (`render_report` -> `nnperf render-report`).
COMMAND_MODULES = (
    "run",
    "train",
    "step",
    "ncu_command",
    "ncu_kernels",
    "render_report",
    "compare_machines",
    "doctor",
    "gpu_env",
    "gpu_study",
    "plan",
    "models",
)


def _modules_for(argv: list[str]) -> tuple[str, ...]:
    """Only the named verb's module when argv names one.

    Every workflow job is one `nnperf VERB` process; importing all verbs would load torch,
    torchvision and seaborn into each of them (seconds per job) for nothing.
    """
    verb = next((arg for arg in argv if not arg.startswith("-")), None)
    module = verb.replace("-", "_") if verb else None
    return (module,) if module in COMMAND_MODULES else COMMAND_MODULES


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nnperf",
        description="Measure how fast deep networks train on this machine, and why.",
    )
    parser.add_argument("--version", action="version", version=f"nnperf {__version__}")
    subparsers = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for name in _modules_for(argv or []):
        importlib.import_module(f"nnperf.commands.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except NnperfError as exc:
        print(f"nnperf {args.verb}: error: {exc}", file=sys.stderr)
        return 2
