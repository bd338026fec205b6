"""One NVTX-marked training step for Nsight Compute, plus a calibration GEMM.

After warm-up, the step is wrapped in a *start/end* NVTX range named `STEP_RANGE`, with nested
start/end ranges per phase (`forward`, `backward`, `optimizer`) so each kernel can be tagged
with its phase. Start/end ranges are process-wide, so they also cover the backward kernels
autograd launches from its own worker thread; push/pop ranges are per thread and miss them.
The batch is fetched and copied before the step range opens: its kernels are not part of the
step that the roofline counts.

Before the step, a GEMM of known size (`CALIBRATION_GEMM_MNK` by default) in the run's dtype
runs inside `CALIBRATION_RANGE`; its exact FLOP count (2*M*N*K) goes to the sidecar JSON so the
profile's FLOP counters can be checked against a known answer.

The range names and the GEMM size are the contract with the Nsight Compute parser; they are
defined once, in `nnperf.ncu.ranges`, and imported here.
Off CUDA the NVTX calls are harmless no-ops (nothing listens), so the whole path runs on CPU.

`perform_profile_step()` is the whole job on a built run (the sidecar document, OOM as a
result, like `nnperf.engine.runner.perform_run`); `profile_step_to_file()` is the process run under
ncu (`nnperf step --request FILE`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from typing import Callable, Iterator

import torch

from nnperf.core.contract import ProfileStepRequest
from nnperf.core.devices import require_available
from nnperf.core.environment import collect_environment
from nnperf.core.files import write_json
from nnperf.core.precision import TENSOR_DTYPES
from nnperf.engine.build import RunData, build, free_after_oom, load_run_data, one_line
from nnperf.engine.runner import label
from nnperf.engine.step import is_out_of_memory
from nnperf.engine.timing import synchronize
from nnperf.ncu.ranges import (
    CALIBRATION_GEMM_MNK,
    CALIBRATION_RANGE,
    PHASE_RANGES,
    STEP_RANGE,
    gemm_flops,
)

FORWARD_RANGE, BACKWARD_RANGE, OPTIMIZER_RANGE = PHASE_RANGES
NVTX_API = "torch.cuda.nvtx.range_start/range_end"
PROFILE_KIND = "profile_step"


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


def calibration_gemm(
    device: torch.device, precision: str, mnk: tuple[int, int, int], nvtx: bool
) -> dict:
    """Run one [M,K] @ [K,N] GEMM in the run's dtype inside CALIBRATION_RANGE; describe it."""
    m, n, k = mnk
    dtype = TENSOR_DTYPES[precision]
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(m, k, device=device, generator=generator).to(dtype)
    b = torch.randn(k, n, device=device, generator=generator).to(dtype)
    torch.mm(a, b)  # outside the range: library handles and heuristics are set up here
    synchronize(device)
    start = time.perf_counter()
    with nvtx_range(CALIBRATION_RANGE, nvtx):
        torch.mm(a, b)
    synchronize(device)
    elapsed = time.perf_counter() - start
    return {
        "range": CALIBRATION_RANGE,
        "m": m,
        "n": n,
        "k": k,
        "dtype": str(dtype).removeprefix("torch."),
        "math": precision,  # tf32 runs the fp32 GEMM with TF32 allowed
        "flops": gemm_flops(m, n, k),
        "wall_time_s": elapsed,
    }


def profile_one_step(
    training, warmup_steps: int, gemm_mnk: tuple[int, int, int] = CALIBRATION_GEMM_MNK
) -> dict:
    """Warm up, run the calibration GEMM, then exactly one NVTX-marked training step."""
    device = training.device
    nvtx = _nvtx_available()
    for _ in range(warmup_steps):
        training.step()
    synchronize(device)
    calibration = calibration_gemm(device, training.precision, gemm_mnk, nvtx)
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


def perform_profile_step(
    request: ProfileStepRequest,
    model_factory: Callable[[], torch.nn.Module],
    data: RunData,
    workflow_dir=None,
) -> dict:
    """Warm up (`request.run.training.warmup_steps`), run the calibration GEMM and one
    NVTX-marked step; returns the sidecar document. OOM -> status "oom"."""
    run = request.run
    size = request.calibration_gemm_size
    mnk = (size,) * 3 if size else CALIBRATION_GEMM_MNK
    started_at = time.time()
    try:
        training = build(run, model_factory, data, run.seed_of(0))
        marked = profile_one_step(training, run.training.warmup_steps, mnk)
        status, error = "ok", None
        del training
    except Exception as exc:  # noqa: BLE001 - only OOM is swallowed
        if not is_out_of_memory(exc):
            raise
        status, error = "oom", one_line(exc)
        marked = {"nvtx": None, "calibration_gemm": None, "step": None}
    if status == "oom":
        free_after_oom(run.device)
    document = {
        "kind": PROFILE_KIND,
        "status": status,
        "error": error,
        **run.header(),
        "input_size": data.input_size,
        **marked,
        "environment": collect_environment(
            device=run.device,
            precision=run.precision,
            settings=run.settings,
            workflow_dir=workflow_dir,
        ),
    }
    document["started_at_unix"] = started_at
    document["ended_at_unix"] = time.time()
    return document


def profile_step_to_file(
    request: ProfileStepRequest,
    out_json: str | os.PathLike | None = None,
    workflow_dir: str | os.PathLike | None = None,
) -> dict:
    """The step profiled under ncu -> its sidecar JSON; returns the sidecar document.

    Without `out_json` the sidecar's essentials (status, ranges, calibration GEMM) are
    printed: under ncu they land in the job's log, where the calibration FLOPs are the known
    answer to check the profile's counters against.
    """
    run = request.run
    require_available(run.device, run.precision)
    run_data, model_factory = load_run_data(run)
    document = perform_profile_step(request, model_factory, run_data, workflow_dir=workflow_dir)
    if out_json:
        write_json(out_json, document)
    else:
        print(json.dumps({k: document[k] for k in ("status", "error", "nvtx", "calibration_gemm")}))
    if document["status"] == "oom":
        print(f"out of memory: {document['error']}", file=sys.stderr)
    else:
        print(f"profiled one step of {label(run)}: loss {document['step']['loss']:.4f}")
    return document
