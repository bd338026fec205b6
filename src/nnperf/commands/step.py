"""`nnperf step`: warm up, then one NVTX-marked training step for Nsight Compute.

Same engine and flags as `nnperf run --profile-one-step`: a calibration GEMM in range
`nnperf_calibration_gemm`, then one step in range `nnperf_step` with nested `forward`,
`backward`, `optimizer` ranges (start/end ranges, see nnperf.profile_step). Writes the sidecar
JSON (calibration FLOPs, range names, environment) to --out-json.
"""

from __future__ import annotations

import argparse

from nnperf.commands.run import add_run_arguments, profile


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "step",
        help="run one NVTX-marked training step (for ncu)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_arguments(parser, profile=True)
    parser.set_defaults(func=profile)
