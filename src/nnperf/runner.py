"""One timed run from request to documents, OOM included.

`perform_run()` seeds, builds the model and training setup, times it, and returns the run
JSON document and the per-step rows. An allocation failure anywhere in a run is a result: the
document gets `status: "oom"`, the message, and null numbers. Any other exception propagates
(the job must fail with its traceback).

`perform_run()` takes the model and data as arguments (a zero-argument model factory and
uint8 arrays), so the engine runs on anything and its tests need no files. The file edge is
`run_to_files()` (rule `timed_run`, `nnperf run`): it checks that the machine can run the
request, loads the prepared dataset and the model by name (`load_run_data()`), and writes
the documents. The profiled step (`nnperf.profile_step`) builds its run with the same pieces;
this module does not import it, so the timed runs' code hash leaves the profiler out.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import sys
import time
from typing import Callable

import numpy as np
import pandas as pd
import torch

from nnperf import timing
from nnperf import vocab
from nnperf.contract import RunRequest
from nnperf.devices import require_available
from nnperf.envinfo import collect_environment
from nnperf.files import write_csv, write_json
from nnperf.train import build_training, is_out_of_memory, resolved_optimizer_impl, seed_everything
from nnperf.vocab import STEP_CSV_COLUMNS

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


def build(request: RunRequest, model_factory: Callable[[], torch.nn.Module], data: RunData):
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


def free_after_oom(device: str) -> None:
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
        training = build(request, model_factory, data)
        optimizer_impl = resolved_optimizer_impl(
            request.settings.optimizer_impl,
            [p for group in training.optimizer.param_groups for p in group["params"]],
        )
        result = timing.time_training(
            training, request.training.warmup_steps, request.training.timed_steps
        )
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
        free_after_oom(request.device)  # after the except block: its traceback held tensors
    document = {
        "kind": vocab.RUN_KIND,
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


# --- the file edge ---------------------------------------------------------------------------


def load_run_data(request: RunRequest) -> tuple[RunData, Callable[[], torch.nn.Module]]:
    """The training split of `request.dataset` (prepared in `request.root`) and a factory of
    fresh `request.model` instances. An unknown model fails before the data is read."""
    from nnperf import data as data_mod
    from nnperf import models as models_mod

    spec = data_mod.get_spec(request.dataset)
    models_mod.get_spec(request.model)
    images, labels = data_mod.load_split(request.root, request.dataset, "train")
    num_classes = int(spec.num_classes)
    input_size = request.input_size or models_mod.input_size(request.model, int(images.shape[1]))

    def model_factory() -> torch.nn.Module:
        return models_mod.build_model(request.model, num_classes)

    run_data = RunData(
        images=images,
        labels=labels,
        mean=tuple(spec.mean),
        std=tuple(spec.std),
        num_classes=num_classes,
        input_size=input_size,
    )
    return run_data, model_factory


def label(request: RunRequest) -> str:
    """How logs name a run: `resnet18_cifar cpu fp32 bs32 baseline rep0`."""
    return (
        f"{request.model} {request.device} {request.precision} bs{request.batch_size} "
        f"{request.variant} rep{request.rep}"
    )


def run_to_files(
    request: RunRequest,
    out_json: str | os.PathLike,
    out_steps: str | os.PathLike,
    workflow_dir: str | os.PathLike | None = None,
) -> dict:
    """One timed run -> the run JSON and the per-step CSV; returns the run document.

    `workflow_dir` is the checkout whose git commit the document records (not part of the
    request: a moved checkout must not change what a run is). An out-of-memory run is
    written like any other (status "oom", an empty step table) and says so on stderr.
    """
    require_available(request.device, request.precision)
    run_data, model_factory = load_run_data(request)
    document, steps = perform_run(request, model_factory, run_data, workflow_dir=workflow_dir)
    write_csv(out_steps, steps_frame(steps))
    write_json(out_json, document)
    if document["status"] == "oom":
        print(f"{label(request)}: out of memory: {document['error']}", file=sys.stderr)
    else:
        print(
            f"{label(request)}: {document['throughput_img_s']:.1f} img/s, median step "
            f"{document['step_time_s']['median'] * 1e3:.2f} ms"
        )
    return document
