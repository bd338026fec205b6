"""Training a configuration to a target accuracy: epochs, evaluation, time to accuracy.

Throughput alone can mislead: a precision or batch size that trains faster per image can
converge worse. MLPerf Training and DAWNBench rank systems by the wall time to a target
accuracy; this module measures that. `train_to_accuracy()` trains one configuration (its
model, precision, batch size and variant toggles, through the same step as the timed runs:
`nnperf.engine.step.Training`) with the recipe in its `ConvergenceSettings`, evaluates the test
split after every epoch, and returns one row per epoch and a summary document:

* optimizer: SGD (momentum, Nesterov) or AdamW (`make_optimizer`);
* learning rate: linear warm-up, then cosine decay to 0, one-cycle, or constant, stepped
  every iteration with `torch.optim.lr_scheduler` (`make_lr_scheduler`);
* loss: `nn.CrossEntropyLoss(label_smoothing=...)`; the test loss is plain cross-entropy;
* precision: autocast for fp16/bf16, with a GradScaler for fp16 (`nnperf.core.precision`);
* time: the training time of each epoch (data, step and optimizer, synchronised on CUDA,
  compilation included in the epoch it happens in) is counted; evaluation and checkpoint
  writing are timed apart and not counted. The time to target is the training time up to
  the end of the first epoch whose test top-1 reaches the target. The first steps of a
  process carry one-time costs (`nnperf.engine.step.one_time_steps`: allocation, autotuning,
  compilation, CUDA-graph recording); they are timed apart too (`one_time_s`, part of
  their epoch's time), so that the next epoch is projected at the steady pace
  (`epoch_time_projection`) rather than as if it compiled again;
* evaluation: through the uncompiled model (`train_to_accuracy` says why).

Checkpoints (`nnperf.training.checkpoints`) make a run resumable: a run killed at any point carries
on from its newest checkpoint and, on the CPU, reproduces the uninterrupted run's per-epoch
losses exactly, because every random state it draws from is saved and the data feeder
draws whole epochs from its own generator (`nnperf.engine.feeders.make_epoch_feeder`).

Three modules hold it: the recipe (`nnperf.training.recipe`: loss, schedule, evaluation),
the loop (`nnperf.training.loop`: `train_to_accuracy()` takes a model factory and arrays, so
tests run it on toy models) and, here, the file edge: `train_to_files()` (the training
stage's rule) loads the dataset and the model by name (pretrained weights included) and
writes the per-epoch CSV and the summary JSON. The names of the other two are importable
from here too, as the one entry point of the stage. This package does not draw figures or
write sentences (`nnperf.report.plots.accuracy`, `nnperf.report.sections.accuracy`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from nnperf.core import vocab
from nnperf.core.contract import TrainingRunRequest
from nnperf.core.errors import NnperfError
from nnperf.core.files import load_json, write_csv, write_json
from nnperf.core.jobs import warn
from nnperf.engine.runner import expected_step_time
from nnperf.engine.step import seed_everything
from nnperf.training import checkpoints
from nnperf.training.loop import (
    TrainingData,
    TrainingResult,
    epoch_time_projection,
    run_identity,
    steady_epoch_time,
    train_to_accuracy,
)
from nnperf.training.recipe import (
    current_lr,
    evaluate,
    make_criterion,
    make_lr_scheduler,
    make_optimizer,
    warmup_iterations,
)

# The loop's and the recipe's names, importable from the stage's entry module.
__all__ = [
    "RESUME_MATCHING",
    "TrainingData",
    "TrainingResult",
    "current_lr",
    "describe_outcome",
    "epoch_line",
    "epoch_time_projection",
    "epochs_frame",
    "evaluate",
    "label",
    "load_training_data",
    "make_criterion",
    "make_lr_scheduler",
    "make_optimizer",
    "model_factory",
    "run_identity",
    "steady_epoch_time",
    "train_to_accuracy",
    "train_to_files",
    "warmup_iterations",
]


def load_training_data(request: TrainingRunRequest) -> TrainingData:
    """Both splits of `request.dataset`, prepared in `request.root`, with its statistics.

    An unknown model fails before the data is read."""
    from nnperf.workload import datasets as data_mod
    from nnperf.workload import models as models_mod

    spec = data_mod.prepared(request.root, request.dataset)
    models_mod.check_model(request.model, request.model_source)
    train_images, train_labels = data_mod.read_split(
        request.root, request.dataset, "train", request.image_size
    )
    test_images, test_labels = data_mod.read_split(
        request.root, request.dataset, "test", request.image_size
    )
    if spec.imagefolder:
        # val/ is decoded once, resized and center-cropped, and evaluated from the device
        # (as CIFAR's test split is); train/ is decoded by the variant's data path.
        from nnperf.workload import image_decoding

        image_decoding.check_resident_fits(
            test_images, torch.device(request.device), "evaluation (val/ decoded once)"
        )
        test_images = image_decoding.decode_all(test_images)
    input_size = (
        request.input_size
        or request.convergence.input_size
        or (
            request.image_size
            if spec.imagefolder
            else models_mod.input_size(
                request.model, int(train_images.shape[1]), request.model_source
            )
        )
    )
    return TrainingData(
        train_images=train_images,
        train_labels=train_labels,
        test_images=test_images,
        test_labels=test_labels,
        mean=tuple(spec.mean),
        std=tuple(spec.std),
        num_classes=int(spec.num_classes),
        input_size=input_size,
    )


def model_factory(
    request: TrainingRunRequest, num_classes: int, resuming: bool, input_size: int | None = None
) -> tuple[Callable[[], torch.nn.Module], dict | None]:
    """A factory of the run's initial model and the record of its pretrained weights.

    With `convergence.pretrained`, the weights file is read now, so a missing or unreadable
    file fails before any training; a resumed run does not need it (the checkpoint holds the
    weights): its factory builds the same layers (torchvision's model with a `num_classes`
    head, backbone frozen as asked) with random weights that the checkpoint replaces.
    """
    from nnperf.workload import models as models_mod

    settings = request.convergence

    def build() -> torch.nn.Module:
        return models_mod.build_model(request.model, num_classes, request.model_source, input_size)

    if settings.pretrained is None:
        return build, None
    if resuming:
        models_mod.pretrained_weights(request.model, settings.pretrained)

        def bare() -> torch.nn.Module:
            model = build()
            if settings.freeze_backbone:
                models_mod.freeze_backbone(model, models_mod.head_of(request.model, model))
            return model

        return bare, None
    model, record = models_mod.build_pretrained(
        request.model,
        num_classes,
        settings.pretrained,
        settings.pretrained_path,
        settings.freeze_backbone,
    )
    # The new head's random init happened just now: callers seed first (train_to_files does),
    # so that it, too, follows convergence.seed.
    return (lambda: model), record


RESUME_MATCHING = "matching"


def _matching_checkpoint(
    checkpoint_dir: str | os.PathLike, identity: Mapping[str, Any], name: str
) -> Path | None:
    """The newest readable checkpoint in `checkpoint_dir` that this very run wrote, or None.

    A file that does not load (truncated by a full disk, say) is renamed `<name>.corrupt`
    with a warning on the terminal naming it, and the run carries on from the newest file
    that loads: a corrupt last.pt costs the epochs since best.pt, and no valid checkpoint is
    ever deleted for it. Readable checkpoints of other settings or code are another run's:
    they are removed, with a line saying why, and the run starts over.
    """
    found, corrupt = checkpoints.readable(checkpoint_dir)
    ours, others = [], []
    for path, checkpoint in found:
        try:
            checkpoints.check_identity(path, checkpoint, identity)
            ours.append((path, int(checkpoint["epoch"])))
        except NnperfError as exc:
            others.append((path, exc))
    for path, exc in others:
        path.unlink()
        print(f"{name}: {'removed' if ours else 'starting over'}: {exc}", flush=True)
    for path, reason in corrupt:
        kept = checkpoints.set_aside(path)
        fallback = (
            f"resuming from {ours[0][0]} (epoch {ours[0][1]})"
            if ours
            else "no other checkpoint of this run loads: starting over"
        )
        warn(f"{name}: {reason.split('; allowed:')[0]}; renamed to {kept.name}; {fallback}")
    return ours[0][0] if ours else None


def train_to_files(
    request: TrainingRunRequest,
    out_summary: str | os.PathLike,
    out_epochs: str | os.PathLike,
    checkpoint_dir: str | os.PathLike | None,
    *,
    resume: bool | str | os.PathLike = True,
    workflow_dir: str | os.PathLike | None = None,
    engine: str | None = None,
    run_json: str | os.PathLike | None = None,
) -> dict:
    """Train `request` to accuracy and write its per-epoch CSV and summary JSON (the training
    stage's rule, and `nnperf` by hand).

    `resume`: True carries on from the newest checkpoint in `checkpoint_dir` when there is
    one (a killed job simply runs again; one of other settings is an error),
    `RESUME_MATCHING` (the workflow's rule) likewise but starts over when the checkpoints
    are another run's (the settings or, with `engine`, the code changed since), a path
    carries on from that checkpoint, False starts over (and overwrites the folder's
    checkpoints). `run_json`: the configuration's timed run, whose step time sizes the
    first epoch for `convergence.max_seconds`. The summary gets the environment record
    (`nnperf.core.environment`) of the process that trained. Progress goes to stdout, one line per
    epoch.
    """
    from nnperf.core.environment import collect_environment

    data = load_training_data(request)
    name = label(request)
    resume_from = None
    if resume == RESUME_MATCHING:
        if checkpoint_dir is not None:
            identity = run_identity(request, data, engine)
            resume_from = _matching_checkpoint(checkpoint_dir, identity, name)
    elif resume is True:
        if checkpoint_dir is not None:
            resume_from = checkpoints.latest(checkpoint_dir)
    elif resume:
        resume_from = Path(resume)
    expected_step = None
    if run_json is not None:
        expected_step = expected_step_time(load_json(run_json, what="run document"))
    seed_everything(request.convergence.seed)
    factory, pretrained = model_factory(
        request, data.num_classes, resume_from is not None, data.input_size
    )
    if resume_from is not None:
        print(f"{name}: resuming from {resume_from}", flush=True)
    result = train_to_accuracy(
        request,
        factory,
        data,
        checkpoint_dir=checkpoint_dir,
        resume_from=resume_from,
        on_epoch=lambda row: print(f"{name}: {epoch_line(row)}", flush=True),
        pretrained=pretrained,
        engine=engine,
        expected_step_time_s=expected_step,
    )
    summary = result.summary
    summary["environment"] = collect_environment(
        device=request.device,
        precision=request.precision,
        settings=request.settings,
        optimizer_impl_resolved=summary["optimizer_impl_resolved"],
        workflow_dir=workflow_dir,
    )
    write_csv(out_epochs, epochs_frame(result.epochs))
    write_json(out_summary, summary)
    stream = sys.stdout if summary["status"] == "ok" else sys.stderr
    print(describe_outcome(request, summary), file=stream, flush=True)
    return summary


def epochs_frame(rows: list[dict]):
    """The per-epoch CSV table (exact columns, even when empty)."""
    import pandas as pd

    return pd.DataFrame(rows, columns=list(vocab.EPOCH_CSV_COLUMNS))


def label(request: TrainingRunRequest) -> str:
    """How logs name a training run: `resnet18_cifar cpu fp32 bs32 baseline recipe default`."""
    return (
        f"{request.model} {request.device} {request.precision} bs{request.batch_size} "
        f"{request.variant} recipe {request.recipe}"
    )


def epoch_line(row: dict) -> str:
    """`epoch 3: train loss 0.412, test loss 0.388, test top-1 91.2%, lr 0.05, 12.3 s`."""
    return (
        f"epoch {row['epoch']}: train loss {row['train_loss']:.4g}, test loss "
        f"{row['test_loss']:.4g}, test top-1 {100 * row['test_top1']:.1f}%, lr {row['lr']:.3g}, "
        f"{row['epoch_time_s']:.3g} s"
    )


def describe_outcome(request: TrainingRunRequest, summary: dict) -> str:
    """One line for the job's log: best accuracy and the time to target."""
    from nnperf.core.wording import count_of, training_budget_sentence

    name = label(request)
    best = summary["best_test_top1"]
    best_text = (
        f"best test top-1 {100 * best:.1f}% (epoch {summary['best_epoch']})"
        if best is not None
        else "no evaluation"
    )
    target = summary["target_accuracy"]
    if target is None:
        reached = "no target"
    elif summary["reached"]:
        reached = (
            f"reached {100 * target:g}% in {summary['time_to_target_s']:.3g} s of training "
            f"(epoch {summary['epochs_to_target']})"
        )
    else:
        reached = f"{100 * target:g}% not reached in {count_of(summary['epochs_run'], 'epoch')}"
    if summary["status"] != "ok":
        why = summary["error"] or summary["stop_reason"]
        if summary["stop_reason"] == "budget":
            why = training_budget_sentence(summary.get("stop_numbers") or {})
        return f"{name}: {summary['status']}: {why}; {best_text}; {reached}"
    return f"{name}: {best_text}; {reached}"
