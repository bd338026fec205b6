"""What a worker process builds for a timed run: the run's data and its `Training`.

`load_run_data()` reads the prepared dataset of a request and names its model (the file
edge: it runs in the worker, so the job's own process never imports torch); `build()` makes
one worker's seeded `Training` from them. The profiled step (`nnperf.ncu.profiled_step`) and
the operator profile (`nnperf.torchprof.profile`) build their steps the same way, and end
an allocation failure with `free_after_oom()` and `one_line()`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from nnperf.core.contract import RunRequest


@dataclasses.dataclass(frozen=True)
class RunData:
    """The training split and what the model needs to know about it."""

    # uint8 [N, H, W, 3], or an ImageFolder's split (decoded by the data path).
    images: Any
    labels: np.ndarray
    mean: tuple[float, ...]
    std: tuple[float, ...]
    num_classes: int
    input_size: int


def one_line(exc: BaseException) -> str:
    """The first line of an exception message (CUDA OOM messages run over many lines)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()


def build(request: RunRequest, model_factory: Callable, data: RunData, seed: int):
    """The `Training` of one worker process of `request`, seeded with `seed`."""
    from nnperf.engine.step import build_training, seed_everything

    seed_everything(seed)
    model = model_factory()
    training = build_training(
        model,
        device=request.device,
        precision=request.precision,
        batch_size=request.batch_size,
        settings=request.settings,
        hyper=request.training,
        seed=seed,
        images=data.images,
        labels=data.labels,
        mean=data.mean,
        std=data.std,
        input_size=data.input_size,
    )
    return training


def free_after_oom(device: str) -> None:
    """Drop what a failed step held so the environment record can still be collected."""
    import gc

    import torch

    gc.collect()
    if device == "cuda" and torch.cuda.is_available():
        torch.cuda.empty_cache()


def load_run_data(request: RunRequest) -> tuple[RunData, Callable]:
    """The training split of `request.dataset` (prepared in `request.root`) and a factory of
    fresh `request.model` instances. An unknown model fails before the data is read."""
    from nnperf.workload import datasets, models

    spec = datasets.prepared(request.root, request.dataset)
    source = request.model_source
    models.check_model(request.model, source)
    images, labels = datasets.read_split(request.root, request.dataset, "train", request.image_size)
    num_classes = int(spec.num_classes)
    # An ImageFolder's images are decoded at the size the model takes, unless asked otherwise.
    input_size = request.input_size or (
        request.image_size
        if spec.imagefolder
        else models.input_size(request.model, int(images.shape[1]), source)
    )

    def model_factory():
        return models.build_model(request.model, num_classes, source, input_size)

    run_data = RunData(
        images=images,
        labels=labels,
        mean=tuple(spec.mean),
        std=tuple(spec.std),
        num_classes=num_classes,
        input_size=input_size,
    )
    return run_data, model_factory
