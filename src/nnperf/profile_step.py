"""One NVTX-marked training step for Nsight Compute, plus a calibration GEMM.

After warm-up, the step is wrapped in a *start/end* NVTX range named `STEP_RANGE`, with nested
start/end ranges per phase (`forward`, `backward`, `optimizer`) so each kernel can be tagged
with its phase. Start/end ranges are process-wide, so they also cover the backward kernels
autograd launches from its own worker thread; push/pop ranges are per thread and miss them.
The batch is fetched and copied before the step range opens: its kernels are not part of the
step that the roofline counts.

Before the step, a GEMM of known size (M=N=K=`CALIBRATION_GEMM_SIZE` by default) in the run's
dtype runs inside `CALIBRATION_RANGE`; its exact FLOP count (2*M*N*K) goes to the sidecar JSON
so the profile's FLOP counters can be checked against a known answer.

The range names (defined in nnperf.runspec, re-exported here) are the contract with the ncu
stream; change them only together.
Off CUDA the NVTX calls are harmless no-ops (nothing listens), so the whole path runs on CPU.
"""

from __future__ import annotations

import contextlib
import time
from typing import Iterator

import torch

from nnperf.precision import TENSOR_DTYPES

# The range names live in nnperf.runspec (importable without torch, for the ncu parser).
from nnperf.runspec import (
    BACKWARD_RANGE,
    CALIBRATION_GEMM_SIZE,
    CALIBRATION_RANGE,
    FORWARD_RANGE,
    OPTIMIZER_RANGE,
    PHASE_RANGES,
    STEP_RANGE,
)
from nnperf.timing import synchronize

NVTX_API = "torch.cuda.nvtx.range_start/range_end"


def _nvtx_available() -> bool:
    """torch builds without CUDA raise on NVTX calls; there the ranges are skipped."""
    try:
        torch.cuda.nvtx.range_end(torch.cuda.nvtx.range_start("nnperf_probe"))
    except (RuntimeError, AttributeError):
        return False
    return True


@contextlib.contextmanager
def nvtx_range(name: str, enabled: bool) -> Iterator[None]:
    """A start/end NVTX range (not push/pop: see the module docstring)."""
    range_id = torch.cuda.nvtx.range_start(name) if enabled else None
    try:
        yield
    finally:
        if enabled:
            torch.cuda.nvtx.range_end(range_id)


def gemm_flops(m: int, n: int, k: int) -> int:
    """FLOPs of C[m,n] = A[m,k] @ B[k,n]: one multiply and one add per (i, j, l)."""
    return 2 * m * n * k


def calibration_gemm(device: torch.device, precision: str, size: int, nvtx: bool) -> dict:
    """Run one size^3 GEMM in the run's dtype inside CALIBRATION_RANGE; describe it."""
    dtype = TENSOR_DTYPES[precision]
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, generator=generator).to(dtype)
    b = torch.randn(size, size, device=device, generator=generator).to(dtype)
    torch.mm(a, b)  # outside the range: library handles and heuristics are set up here
    synchronize(device)
    start = time.perf_counter()
    with nvtx_range(CALIBRATION_RANGE, nvtx):
        torch.mm(a, b)
    synchronize(device)
    elapsed = time.perf_counter() - start
    return {
        "range": CALIBRATION_RANGE,
        "m": size,
        "n": size,
        "k": size,
        "dtype": str(dtype).removeprefix("torch."),
        "math": precision,  # tf32 runs the fp32 GEMM with TF32 allowed
        "flops": gemm_flops(size, size, size),
        "wall_time_s": elapsed,
    }


def profile_one_step(training, warmup_steps: int, gemm_size: int = CALIBRATION_GEMM_SIZE) -> dict:
    """Warm up, run the calibration GEMM, then exactly one NVTX-marked training step."""
    device = training.device
    nvtx = _nvtx_available()
    for _ in range(warmup_steps):
        training.step()
    synchronize(device)
    calibration = calibration_gemm(device, training.precision, gemm_size, nvtx)
    inputs, labels = training.to_device(training.next_batch())
    synchronize(device)
    start = time.perf_counter()
    with nvtx_range(STEP_RANGE, nvtx):
        with nvtx_range(FORWARD_RANGE, nvtx):
            loss = training.forward(inputs, labels)
        with nvtx_range(BACKWARD_RANGE, nvtx):
            training.backward(loss)
        with nvtx_range(OPTIMIZER_RANGE, nvtx):
            training.optimizer_step()
    synchronize(device)
    elapsed = time.perf_counter() - start
    return {
        "nvtx": {
            "api": NVTX_API,
            "active": nvtx,
            "step_range": STEP_RANGE,
            "phase_ranges": list(PHASE_RANGES),
            "calibration_range": CALIBRATION_RANGE,
        },
        "calibration_gemm": calibration,
        "step": {"loss": float(loss.detach().float().cpu()), "wall_time_s": elapsed},
    }
