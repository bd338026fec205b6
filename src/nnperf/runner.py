"""One timed run (or one profiled step) from request to documents, OOM included.

`perform_run()` seeds, builds the model and training setup, times it, and returns the run
JSON document and the per-step rows; `perform_profile_step()` does the same for the
NVTX-marked step and returns its sidecar document. An allocation failure anywhere in a run
is a result: the document gets `status: "oom"`, the message, and null numbers. Any other
exception propagates (the job must fail with its traceback).

Models and data come in as arguments (a zero-argument model factory and uint8 arrays), so
this module never reads files; `nnperf.commands.run` loads them by name.
"""

from __future__ import annotations

import dataclasses
import gc
import time
from typing import Callable

import numpy as np
import pandas as pd
import torch

from nnperf import profile_step, timing
from nnperf.envinfo import collect_environment
from nnperf.vocab import STEP_CSV_COLUMNS
from nnperf.contract import RunRequest
from nnperf.train import build_training, is_out_of_memory, resolved_optimizer_impl, seed_everything

RUN_KIND = "timed_run"
PROFILE_KIND = "profile_step"
NULL_TIMING_FIELDS = (
    "throughput_img_s",
    "images_timed",
    "timed_window_s",
    "step_time_s",
    "phase_time_s",
    "compile_time_s",
    "first_step_time_s",
    "warmup_time_s",
    "warmup_step_time_s",
    "loss_start",
    "loss_end",
    "peak_memory_device_bytes",
    "timed_window_started_at_unix",
    "timed_window_ended_at_unix",
)


@dataclasses.dataclass(frozen=True)
class RunData:
    """The training split and what the model needs to know about it."""

    images: np.ndarray
    labels: np.ndarray
    mean: tuple[float, ...]
    std: tuple[float, ...]
    num_classes: int
    input_size: int


def one_line(exc: BaseException) -> str:
    """The first line of an exception message (CUDA OOM messages run over many lines)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()


def _build(request: RunRequest, model_factory: Callable[[], torch.nn.Module], data: RunData):
    seed_everything(request.seed)
    model = model_factory()
    training = build_training(
        model,
        device=request.device,
        precision=request.precision,
        batch_size=request.batch_size,
        settings=request.settings,
        hyper=request.training,
        seed=request.seed,
        images=data.images,
        labels=data.labels,
        mean=data.mean,
        std=data.std,
        input_size=data.input_size,
    )
    return training


def _free_after_oom(device: str) -> None:
    """Drop what the failed step held so the environment record can still be collected."""
    gc.collect()
    if device == "cuda" and torch.cuda.is_available():
        torch.cuda.empty_cache()


def perform_run(
    request: RunRequest,
    model_factory: Callable[[], torch.nn.Module],
    data: RunData,
    workflow_dir=None,
) -> tuple[dict, list[dict]]:
    """Time one rep; returns (run document, per-step rows). OOM -> status "oom"."""
    started_at = time.time()
    optimizer_impl = None
    try:
        training = _build(request, model_factory, data)
        optimizer_impl = resolved_optimizer_impl(
            request.settings.optimizer_impl,
            [p for group in training.optimizer.param_groups for p in group["params"]],
        )
        result = timing.time_training(training, request.training.warmup_steps, request.training.timed_steps)
        fields = timing.summarize(result, request.batch_size, bool(request.settings.compile))
        steps = result.steps
        status, error = "ok", None
        del training
    except Exception as exc:  # noqa: BLE001 - only OOM is swallowed, see below
        if not is_out_of_memory(exc):
            raise
        status, error = "oom", one_line(exc)
        fields = {name: None for name in NULL_TIMING_FIELDS}
        steps = []
    if status == "oom":
        _free_after_oom(request.device)  # after the except block: its traceback held tensors
    document = {
        "kind": RUN_KIND,
        "status": status,
        "error": error,
        **request.header(),
        "num_classes": data.num_classes,
        "input_size": data.input_size,
        "train_images": int(len(data.labels)),
        **fields,
        "peak_memory_host_bytes": timing.peak_host_memory_bytes(),
        "environment": collect_environment(
            device=request.device,
            precision=request.precision,
            settings=request.settings,
            optimizer_impl_resolved=optimizer_impl,
            workflow_dir=workflow_dir,
        ),
    }
    document["started_at_unix"] = started_at
    document["ended_at_unix"] = time.time()
    return document, steps


def steps_frame(steps: list[dict]) -> pd.DataFrame:
    """The per-step CSV table (exact columns, even when empty)."""
    return pd.DataFrame(steps, columns=list(STEP_CSV_COLUMNS))


def perform_profile_step(
    request: RunRequest,
    model_factory: Callable[[], torch.nn.Module],
    data: RunData,
    gemm_mnk: tuple[int, int, int] | None = None,
    workflow_dir=None,
) -> dict:
    """Warm up and run one NVTX-marked step; returns the sidecar document.

    `gemm_mnk` overrides the calibration GEMM's (M, N, K) (default: nnperf.ncu's)."""
    started_at = time.time()
    try:
        training = _build(request, model_factory, data)
        mnk = gemm_mnk or profile_step.CALIBRATION_GEMM_MNK
        marked = profile_step.profile_one_step(training, request.training.warmup_steps, mnk)
        status, error = "ok", None
        del training
    except Exception as exc:  # noqa: BLE001 - only OOM is swallowed
        if not is_out_of_memory(exc):
            raise
        status, error = "oom", one_line(exc)
        marked = {"nvtx": None, "calibration_gemm": None, "step": None}
    if status == "oom":
        _free_after_oom(request.device)
    document = {
        "kind": PROFILE_KIND,
        "status": status,
        "error": error,
        **request.header(),
        "input_size": data.input_size,
        **marked,
        "environment": collect_environment(
            device=request.device,
            precision=request.precision,
            settings=request.settings,
            workflow_dir=workflow_dir,
        ),
    }
    document["started_at_unix"] = started_at
    document["ended_at_unix"] = time.time()
    return document
