"""`nnperf step --request FILE`: warm up, then one NVTX-marked training step for Nsight Compute.

FILE is a `ProfileStepRequest` as JSON (rule `profile_request` writes it; by hand,
`nnperf.core.contract.write_request`). A calibration GEMM runs in range `nnperf_calibration_gemm`,
then one step in range `nnperf_step` with `forward`, `backward`, `optimizer` ranges inside
(see nnperf.ncu.profiled_step). `nnperf ncu-command profile --request FILE` runs this under ncu.
"""

from __future__ import annotations

import argparse
import os


def register(subparsers) -> None:
    parser = subparsers.add_parser("step", help="run one NVTX-marked step", description=__doc__)
    parser.add_argument("--request", required=True, help="ProfileStepRequest JSON to run")
    parser.add_argument(
        "--out-json", help="sidecar JSON to write (default: print its essentials, for the log)"
    )
    parser.add_argument(
        "--workflow-dir", default=os.curdir, help="checkout whose git commit is recorded"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from nnperf.core.contract import ProfileStepRequest, read_request
    from nnperf.ncu.profiled_step import profile_step_to_file

    request = read_request(ProfileStepRequest, args.request)
    profile_step_to_file(request, args.out_json, args.workflow_dir)
    return 0
