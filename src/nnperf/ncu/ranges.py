"""The NVTX ranges that say what Nsight Compute profiles, and the calibration GEMM.

The profiled step (`nnperf.ncu.profiled_step`) opens these ranges, `ncu` is told to profile
only the kernels inside them (`nvtx_include_filters`, used by `nnperf.ncu.metrics
.profile_command`), and the kernels table reads each kernel's phase back from the export's
NVTX column (`phase_of`). Defining the names once, here, is what keeps the three in step.
The calibration GEMM's size and tolerance live here for the same reason: the profiled step
runs it inside its own range and the roofline (`nnperf.roofline.points`) checks the FLOPs
counted there against 2*M*N*K.

It holds names and string matching only: no pandas, no torch, so the profiled process
imports it without loading the parser.
"""

from __future__ import annotations

import re

# --------------------------------------------------------------------------------------------
# NVTX ranges. The timing stream (`nnperf step`) opens them with torch.cuda.nvtx.range_start /
# range_end. Those are *start/end* ranges: process-wide, so they also cover the backward kernels
# that autograd launches from its own thread (a push/pop range lives on one thread's stack and
# misses them).
#
# How `--nvtx-include` matches (Nsight Compute CLI manual, "NVTX Filtering"): a configuration
# WITHOUT a trailing "/" names a start/end range ("nnperf_step" = kernels launched while the
# start/end range "nnperf_step" of the default domain is open); a configuration WITH a trailing
# "/" names a push/pop range on the launching thread's stack ("nnperf_step/"). `domain@range`
# selects a domain, `regex:` switches to regular expressions. Several --nvtx-include options are
# a union. So we pass the plain range names, without "/".
# --------------------------------------------------------------------------------------------
STEP_RANGE = "nnperf_step"
PHASE_RANGES = ("forward", "backward", "optimizer")
CALIBRATION_RANGE = "nnperf_calibration_gemm"

# The calibration GEMM: C[M,N] = A[M,K] @ B[K,N] in the run's precision, inside its own range.
# 2*M*N*K FLOPs (one multiply and one add per MAC); the measured/expected ratio checks the FLOP
# counting of every profile. The timing stream should import these so both sides agree.
CALIBRATION_GEMM_MNK = (4096, 4096, 4096)
CALIBRATION_TOLERANCE = 0.02  # measured FLOPs must be within 2 % of 2*M*N*K


def gemm_flops(m: int, n: int, k: int) -> int:
    """FLOPs of C[m,n] = A[m,k] @ B[k,n]: one multiply and one add per (i, j, l); the
    ceilings stage's GEMMs are counted the same way."""
    return 2 * m * n * k


def nvtx_include_filters() -> list[str]:
    """`--nvtx-include` configurations: the step and the calibration GEMM, as start/end ranges."""
    return [STEP_RANGE, CALIBRATION_RANGE]


# --------------------------------------------------------------------------------------------
# NVTX context of a kernel.
# --------------------------------------------------------------------------------------------
def nvtx_ranges(cell: str) -> list[str]:
    """Names of the NVTX ranges in one `Id:Domain:Start/Stop_Range:...` (or push/pop) cell.

    Each entry reads `<id>:<domain>:<range>:<PL_Type>:<PL_Value>:<CLR_Type>:<Color>:<Msg_Type>:
    <Msg>` (push/pop entries lack the id and follow the thread id); entries are quoted and
    separated by spaces. Only our own range names are looked for, as whole `:`-delimited fields,
    so the parse does not depend on how many optional fields follow.
    """
    names = (STEP_RANGE, CALIBRATION_RANGE, *PHASE_RANGES)
    found = []
    for name in names:
        if re.search(rf"(?:^|[:\s\"]){re.escape(name)}(?=:|\"|\s|$)", cell or ""):
            found.append(name)
    return found


def phase_of(nvtx_cell: str) -> str:
    """`calibration`, `forward`, `backward`, `optimizer`, `step` (inside the step but in no
    phase range) or `none` (outside every range we set)."""
    ranges = nvtx_ranges(nvtx_cell)
    if CALIBRATION_RANGE in ranges:
        return "calibration"
    for phase in PHASE_RANGES:
        if phase in ranges:
            return phase
    return "step" if STEP_RANGE in ranges else "none"
