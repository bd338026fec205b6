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

`train_to_accuracy()` takes a model factory and arrays, so tests run it on toy models; the
file edge is `train_to_files()` (the training stage's rule), which loads the dataset and the
model by name (pretrained weights included) and writes the per-epoch CSV and the summary
JSON. This module does not draw figures or write sentences (`nnperf.report.plots.accuracy`,
`nnperf.report.time_to_accuracy`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import torch

from nnperf.core import vocab
from nnperf.core import precision as precision_mod
from nnperf.core.contract import ConvergenceSettings, TrainingRunRequest, to_dict
from nnperf.core.errors import NnperfError
from nnperf.core.files import load_json, write_csv, write_json
from nnperf.engine.feeders import make_epoch_feeder
from nnperf.engine.runner import expected_step_time
from nnperf.engine.step import (
    Training,
    apply_process_settings,
    compile_model,
    is_out_of_memory,
    make_input_preparer,
    one_time_steps,
    optimizer_kwargs,
    place_model,
    resolved_optimizer_impl,
    seed_everything,
    trainable_parameters,
)
from nnperf.training import checkpoints


@dataclasses.dataclass(frozen=True)
class TrainingData:
    """Both splits of a dataset and what the model needs to know about them."""

    train_images: np.ndarray  # uint8 [N, H, W, 3]
    train_labels: np.ndarray  # int64 [N]
    test_images: np.ndarray
    test_labels: np.ndarray
    mean: tuple[float, ...]
    std: tuple[float, ...]
    num_classes: int
    input_size: int

    def digest(self) -> str:
        """SHA-256 of both splits' pixels and labels: the data part of a run's identity."""
        digest = hashlib.sha256()
        for array in (self.train_images, self.train_labels, self.test_images, self.test_labels):
            digest.update(np.ascontiguousarray(array).tobytes())
        return digest.hexdigest()


@dataclasses.dataclass
class TrainingResult:
    """What a training run returns: its summary document and its per-epoch rows."""

    summary: dict[str, Any]
    epochs: list[dict[str, Any]]


# --- the recipe ---------------------------------------------------------------------------


def make_optimizer(
    params: list[torch.Tensor], settings: ConvergenceSettings, impl: str = "default"
) -> torch.optim.Optimizer:
    """SGD with momentum (Nesterov when asked) or AdamW, in the variant's implementation."""
    if settings.optimizer == "sgd":
        return torch.optim.SGD(
            params,
            lr=settings.lr,
            momentum=settings.momentum,
            nesterov=settings.nesterov,
            weight_decay=settings.weight_decay,
            **optimizer_kwargs(impl),
        )
    if settings.optimizer == "adamw":
        # betas and eps keep torch's defaults (0.9, 0.999), 1e-8: those of Adam, which is
        # what AdamW is when weight_decay is 0.
        return torch.optim.AdamW(
            params, lr=settings.lr, weight_decay=settings.weight_decay, **optimizer_kwargs(impl)
        )
    raise NnperfError(
        f"convergence.optimizer {settings.optimizer!r} is unknown; allowed: "
        f"{', '.join(vocab.TRAINING_OPTIMIZERS)}"
    )


def make_criterion(settings: ConvergenceSettings) -> torch.nn.Module:
    """The training loss: cross-entropy with the recipe's label smoothing."""
    return torch.nn.CrossEntropyLoss(label_smoothing=settings.label_smoothing)


def warmup_iterations(settings: ConvergenceSettings, steps_per_epoch: int) -> int:
    """The warm-up in iterations: `warmup_epochs` of them, rounded."""
    return min(round(settings.warmup_epochs * steps_per_epoch), settings.epochs * steps_per_epoch)


def make_lr_scheduler(
    optimizer: torch.optim.Optimizer, settings: ConvergenceSettings, steps_per_epoch: int
) -> torch.optim.lr_scheduler.LRScheduler:
    """The learning-rate schedule, stepped once per iteration, over `epochs` epochs.

    With W warm-up iterations and T iterations in all, iteration i (from 0) trains at:

    * warm-up (every schedule but one_cycle): `lr * (i + 1) / W` for i < W, so the first
      step is not taken at lr 0 and iteration W - 1 reaches `lr` (seed 000's ramp);
    * `cosine`: then `lr * (1 + cos(pi * (i - W) / (T - W))) / 2`, down to 0 after the last;
    * `constant`: then `lr`;
    * `one_cycle`: torch's OneCycleLR with `pct_start = W / T` and its other defaults (from
      lr/25 up to lr, then cosine annealing to lr/25e4; SGD momentum, or AdamW's beta1,
      cycled between 0.95 and 0.85 the other way round).
    """
    total = settings.epochs * steps_per_epoch
    warmup = warmup_iterations(settings, steps_per_epoch)
    sched = torch.optim.lr_scheduler
    if settings.schedule == "one_cycle":
        return sched.OneCycleLR(
            optimizer, max_lr=settings.lr, total_steps=total, pct_start=warmup / total
        )
    if settings.schedule == "cosine":
        after = sched.CosineAnnealingLR(optimizer, T_max=max(total - warmup, 1))
    elif settings.schedule == "constant":
        after = sched.ConstantLR(optimizer, factor=1.0, total_iters=0)
    else:
        raise NnperfError(
            f"convergence.schedule {settings.schedule!r} is unknown; allowed: "
            f"{', '.join(vocab.LR_SCHEDULES)}"
        )
    if warmup == 0:
        return after
    # LinearLR's factor is start + (1 - start) * min(i, n) / n: start 1/W over n = W - 1
    # iterations makes it (i + 1) / W.
    ramp = sched.LinearLR(optimizer, start_factor=1.0 / warmup, total_iters=warmup - 1)
    return sched.SequentialLR(optimizer, [ramp, after], milestones=[warmup])


def current_lr(optimizer: torch.optim.Optimizer) -> float:
    return float(optimizer.param_groups[0]["lr"])


# --- evaluation -----------------------------------------------------------------------------


def evaluate(
    model: torch.nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    prepare,
    batch_size: int,
    device_type: str,
    precision: str,
) -> tuple[float, float]:
    """(mean cross-entropy, top-1 accuracy) of `model` on uint8 NCHW `images` on the device.

    Eval mode (batch-norm running statistics, no dropout), no gradients, the run's autocast;
    the loss is computed in fp32 from the logits. One host sync, at the end.
    """
    was_training = model.training
    model.eval()
    loss_sum = torch.zeros((), dtype=torch.float64, device=images.device)
    correct = torch.zeros((), dtype=torch.int64, device=images.device)
    with torch.no_grad():
        for start in range(0, len(labels), batch_size):
            inputs = prepare(images[start : start + batch_size])
            targets = labels[start : start + batch_size]
            with precision_mod.autocast(device_type, precision):
                logits = model(inputs)
            logits = logits.float()
            loss_sum += torch.nn.functional.cross_entropy(logits, targets, reduction="sum")
            correct += (logits.argmax(dim=1) == targets).sum()
    model.train(was_training)
    count = max(len(labels), 1)
    return float(loss_sum.item()) / count, int(correct.item()) / count


# --- the run --------------------------------------------------------------------------------


def run_identity(
    request: TrainingRunRequest, data: TrainingData, engine: str | None = None
) -> dict[str, Any]:
    """What a checkpoint must match to be resumed by this run: model, classes and a
    fingerprint of the request's definition plus the data it trains and tests on, and
    `engine` (the workflow's hash of the training code) when given, so that a run of changed
    code starts over instead of finishing an old run's trajectory."""
    definition = {
        **request.definition(),
        **({"engine": engine} if engine else {}),
        "num_classes": data.num_classes,
        "input_size": data.input_size,
        "data": {
            "train_images": int(len(data.train_labels)),
            "test_images": int(len(data.test_labels)),
            "sha256": data.digest(),
        },
    }
    text = json.dumps(definition, sort_keys=True, separators=(",", ":"))
    return {
        "model": request.model,
        "num_classes": data.num_classes,
        "definition": definition,
        "fingerprint": hashlib.sha256(text.encode()).hexdigest(),
    }


def steady_epoch_time(row: Mapping, steps_per_epoch: int, one_time_steps: int) -> float | None:
    """An epoch's training time at its steady pace: without its one-time steps (`one_time_s`,
    the first `one_time_steps` of a process), its other steps scaled to a whole epoch. None
    when every step of the epoch was a one-time step."""
    one_time = float(row.get("one_time_s") or 0.0)
    if one_time <= 0:
        return float(row["epoch_time_s"])
    steady_steps = steps_per_epoch - one_time_steps
    if steady_steps <= 0:
        return None
    return (float(row["epoch_time_s"]) - one_time) * steps_per_epoch / steady_steps


def epoch_time_projection(
    rows: list[dict],
    expected_step_time_s: float | None,
    steps_per_epoch: int,
    one_time_steps: int = 1,
) -> float | None:
    """How long the next epoch will train, at the steady pace: the last epoch's time
    without its one-time steps (`steady_epoch_time`: a first epoch that compiled for 20 s
    does not make every later epoch 20 s longer), or, before any epoch, the timed runs'
    steady step time x steps per epoch. Where neither is known, the last epoch's whole
    time, and before any epoch None: no projection (an over-budget timed run that measured
    no steady step gives no step time; the first epoch then runs and is measured).

    A process's own one-time costs are not projected onto its first epoch either: budget
    verdicts are made on steady steps (DESIGN §3)."""
    trained = [row for row in rows if row["epoch"] > 0]
    if trained:
        steady = steady_epoch_time(trained[-1], steps_per_epoch, one_time_steps)
        if steady is not None:
            return steady
    if expected_step_time_s:
        return float(expected_step_time_s) * steps_per_epoch
    if trained:
        return float(trained[-1]["epoch_time_s"])
    return None


def _synchronize(device: torch.device) -> None:
    """Wait for queued device work before a clock is read (CUDA and MPS run asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def _first_at_target(rows: list[dict], target: float | None) -> dict | None:
    if target is None:
        return None
    return next((row for row in rows if row["test_top1"] >= target), None)


def _summary_numbers(rows: list[dict], settings: ConvergenceSettings) -> dict[str, Any]:
    """Best accuracy, time to target and totals from the per-epoch rows."""
    target = settings.target_accuracy
    hit = _first_at_target(rows, target)
    trained = [row for row in rows if row["epoch"] > 0]
    best = max(rows, key=lambda row: (row["test_top1"], -row["epoch"])) if rows else None
    last = rows[-1] if rows else None
    train_time = last["train_time_s"] if last else 0.0
    images = last["images_seen"] if last else 0
    return {
        "target_accuracy": target,
        "reached": None if target is None else hit is not None,
        "time_to_target_s": hit["train_time_s"] if hit else None,
        "epochs_to_target": hit["epoch"] if hit else None,
        "best_test_top1": best["test_top1"] if best else None,
        "best_epoch": best["epoch"] if best else None,
        "initial_test_top1": rows[0]["test_top1"] if rows else None,
        "final_test_top1": last["test_top1"] if last else None,
        "final_test_loss": last["test_loss"] if last else None,
        "final_train_loss": trained[-1]["train_loss"] if trained else None,
        "epochs_run": len(trained),
        "train_time_s": train_time,
        "eval_time_s": float(sum(row["eval_time_s"] for row in rows)),
        # Part of train_time_s: the first steps of each process (compilation, autotuning).
        "one_time_s": float(sum(row.get("one_time_s") or 0.0 for row in rows)),
        "images_seen": images,
        # Over all training time, first epoch (and any compilation) included, as a user
        # waits for it; the per-epoch rows show the steady rate.
        "throughput_img_s": images / train_time if train_time > 0 else None,
    }


def train_to_accuracy(
    request: TrainingRunRequest,
    model_factory: Callable[[], torch.nn.Module],
    data: TrainingData,
    *,
    checkpoint_dir: str | os.PathLike | None = None,
    resume_from: str | os.PathLike | None = None,
    on_epoch: Callable[[dict], None] | None = None,
    pretrained: dict | None = None,
    engine: str | None = None,
    expected_step_time_s: float | None = None,
) -> TrainingResult:
    """Train `request`'s configuration to accuracy; return its summary and per-epoch rows.

    `model_factory()` builds the model on the CPU after the run is seeded, so its initial
    weights are reproducible. `checkpoint_dir`: where last/best/final.pt go (None: no
    checkpoints). `resume_from`: a checkpoint of this very run to carry on from (its model,
    settings and data must match, else one NnperfError line); the factory's weights are then
    replaced by the checkpoint's. `on_epoch(row)` is called after each epoch's row is
    complete and its checkpoints are written (progress lines for a log). `pretrained`: where
    the initial weights came from, for the summary (`nnperf.workload.models.build_pretrained`).

    Row 0 is the model before training. An allocation failure ends the run with status
    `oom`, a NaN/inf training loss with `diverged`; each keeps the rows so far. With
    `convergence.max_seconds`, an epoch that would take the training time past it is not
    started: status `over_budget`. Its time is projected at the steady pace
    (`epoch_time_projection`: one-time costs left out) from the last epoch, or, before the
    first, from `expected_step_time_s` (the timed runs' steady step time; None: unknown, the
    first epoch runs) x steps per epoch, so a configuration whose single epoch cannot fit
    (bf16 on a CPU without bf16 arithmetic) costs nothing but the first evaluation.
    `engine` joins the run's identity (`run_identity`).
    """
    settings = request.convergence
    started_at = time.time()
    device = torch.device(request.device)
    variant = request.settings
    identity = run_identity(request, data, engine)

    seed_everything(settings.seed)
    apply_process_settings(request.device, request.precision, variant)
    base_model = place_model(model_factory(), device, variant)
    params = trainable_parameters(base_model)
    optimizer = make_optimizer(params, settings, variant.optimizer_impl)
    model = compile_model(base_model, variant)
    feeder = make_epoch_feeder(
        data.train_images,
        data.train_labels,
        request.batch_size,
        variant,
        settings.augment,
        settings.seed,
        device,
    )
    steps_per_epoch = feeder.steps_per_epoch
    images_per_epoch = steps_per_epoch * request.batch_size
    scheduler = make_lr_scheduler(optimizer, settings, steps_per_epoch)
    prepare = make_input_preparer(
        data.mean, data.std, data.train_images.shape[1], data.input_size, variant, device
    )
    scaler = precision_mod.make_grad_scaler(request.device, request.precision)
    training = Training(
        model,
        optimizer,
        scaler,
        feeder,
        prepare,
        device,
        request.precision,
        make_criterion(settings),
    )
    test_images = (
        torch.from_numpy(np.ascontiguousarray(data.test_images)).to(device).permute(0, 3, 1, 2)
    )
    test_labels = torch.from_numpy(np.asarray(data.test_labels, dtype=np.int64)).to(device)

    rows: list[dict] = []
    resumed = None
    if resume_from is not None:
        checkpoint = checkpoints.load(resume_from)
        checkpoints.check_identity(resume_from, checkpoint, identity)
        base_model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        scheduler.load_state_dict(checkpoint["scheduler"])
        if scaler is not None and checkpoint.get("scaler") is not None:
            scaler.load_state_dict(checkpoint["scaler"])
        checkpoints.restore_rng_states(checkpoint["rng"], feeder.generator)
        # The names of the variant and recipe are not part of the identity: take today's.
        rows = [{**row, **request.keys()} for row in checkpoint["rows"]]
        pretrained = checkpoint.get("pretrained") or pretrained
        resumed = {"path": str(resume_from), "epoch": int(checkpoint["epoch"])}
        del checkpoint

    def evaluate_now() -> dict[str, float]:
        _synchronize(device)
        began = time.perf_counter()
        # The uncompiled module (the compiled one's `_orig_mod`: the same parameters and
        # buffers): through the compiled one, eval mode under no_grad would compile a second
        # graph, and the test split's last, smaller batch (10,000 CIFAR-10 test images at
        # batch 256 leave 16) a third with dynamic shapes, each costing about what the
        # training graph's compilation costs, for a forward pass that runs once an epoch.
        loss, top1 = evaluate(
            base_model,
            test_images,
            test_labels,
            prepare,
            request.batch_size,
            device.type,
            request.precision,
        )
        return {"test_loss": loss, "test_top1": top1, "eval_time_s": time.perf_counter() - began}

    def save(which: str) -> None:
        checkpoints.save(
            checkpoints.path_of(checkpoint_dir, which),
            {
                "model_name": identity["model"],
                "num_classes": identity["num_classes"],
                "fingerprint": identity["fingerprint"],
                "definition": identity["definition"],
                "epoch": rows[-1]["epoch"],
                "model": base_model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "scaler": scaler.state_dict() if scaler is not None else None,
                "rng": checkpoints.rng_states(feeder.generator, device.type == "cuda"),
                "rows": rows,
                "pretrained": pretrained,
            },
        )

    status, stop_reason, error = "ok", "epochs", None
    checkpoint_time = 0.0
    # This process's one-time steps (a resumed run compiles and autotunes again).
    one_time = one_time_steps(variant, device.type)
    one_time_left = one_time
    try:
        if not rows:
            rows.append(
                {
                    **request.keys(),
                    "epoch": 0,
                    "train_loss": None,
                    **evaluate_now(),
                    # The learning rate the first step will take.
                    "lr": current_lr(optimizer),
                    "epoch_time_s": 0.0,
                    "one_time_s": 0.0,
                    "train_time_s": 0.0,
                    "throughput_img_s": None,
                    "images_seen": 0,
                }
            )
        while True:
            previous = rows[-1]
            if settings.stop_at_target and _first_at_target(rows, settings.target_accuracy):
                stop_reason = "target"
                break
            if previous["epoch"] >= settings.epochs:
                break
            projected = epoch_time_projection(rows, expected_step_time_s, steps_per_epoch, one_time)
            if settings.max_seconds is not None and (
                previous["train_time_s"] + (projected or 0.0) > settings.max_seconds
            ):
                status, stop_reason = "over_budget", "budget"
                error = (
                    f"stopped after {previous['train_time_s']:.3g} s of training: epoch "
                    f"{previous['epoch'] + 1} would take ~{projected or 0:.3g} s more, past "
                    f"the recipe's max_seconds = {settings.max_seconds:g}"
                )
                break
            epoch = previous["epoch"] + 1
            _synchronize(device)
            began = time.perf_counter()
            one_time_s = 0.0
            loss_sum = torch.zeros((), dtype=torch.float64, device=device)
            for batch in feeder.epoch():
                inputs, labels = training.to_device(batch)
                loss = training.forward(inputs, labels)
                training.backward(loss)
                lr = current_lr(optimizer)  # a Python float: no device sync
                training.optimizer_step()
                scheduler.step()
                loss_sum += loss.detach()
                if one_time_left:
                    one_time_left -= 1
                    if not one_time_left:  # one device sync a process, after its one-time steps
                        _synchronize(device)
                        one_time_s = time.perf_counter() - began
            _synchronize(device)
            epoch_time = time.perf_counter() - began
            if one_time_left:  # the epoch was shorter than the one-time steps: all of it
                one_time_s = epoch_time
            train_loss = float(loss_sum.item()) / steps_per_epoch
            rows.append(
                {
                    **request.keys(),
                    "epoch": epoch,
                    "train_loss": train_loss,
                    **evaluate_now(),
                    "lr": lr,  # that of the epoch's last step
                    "epoch_time_s": epoch_time,
                    "one_time_s": one_time_s,
                    "train_time_s": previous["train_time_s"] + epoch_time,
                    "throughput_img_s": images_per_epoch / epoch_time if epoch_time > 0 else None,
                    "images_seen": previous["images_seen"] + images_per_epoch,
                }
            )
            if not math.isfinite(train_loss):
                status, stop_reason = "diverged", "diverged"
                error = f"the training loss became {train_loss} in epoch {epoch}"
                break
            if checkpoint_dir is not None:
                began = time.perf_counter()
                if settings.checkpoint_every and epoch % settings.checkpoint_every == 0:
                    save("last")
                earlier_best = max((row["test_top1"] for row in rows[1:-1]), default=-1.0)
                if rows[-1]["test_top1"] > earlier_best:
                    save("best")
                checkpoint_time += time.perf_counter() - began
            if on_epoch is not None:
                on_epoch(dict(rows[-1]))
        if checkpoint_dir is not None and status == "ok" and rows[-1]["epoch"] > 0:
            began = time.perf_counter()
            save("final")
            checkpoint_time += time.perf_counter() - began
    except Exception as exc:  # noqa: BLE001 - only allocation failures are results
        if not is_out_of_memory(exc):
            raise
        status, stop_reason = "oom", "oom"
        error = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        _free_after_oom(device)

    total, trainable = _count_parameters(base_model)
    summary = {
        "kind": vocab.TRAINING_RUN_KIND,
        "status": status,
        "stop_reason": stop_reason,
        "error": error,
        **request.header(),
        "fingerprint": identity["fingerprint"],
        "num_classes": data.num_classes,
        "input_size": data.input_size,
        "train_images": int(len(data.train_labels)),
        "test_images": int(len(data.test_labels)),
        "steps_per_epoch": steps_per_epoch,
        "warmup_iterations": warmup_iterations(settings, steps_per_epoch),
        **_summary_numbers(rows, settings),
        "checkpoint_time_s": checkpoint_time,
        "parameters": total,
        "trainable_parameters": trainable,
        "optimizer_impl_resolved": resolved_optimizer_impl(variant.optimizer_impl, params),
        "pretrained": pretrained,
        "resumed_from": resumed,
        "checkpoints": (
            {
                which: str(checkpoints.path_of(checkpoint_dir, which))
                for which in checkpoints.NAMES
                if checkpoints.path_of(checkpoint_dir, which).is_file()
            }
            if checkpoint_dir is not None
            else None
        ),
        "started_at_unix": started_at,
        "ended_at_unix": time.time(),
    }
    return TrainingResult(summary=summary, epochs=rows)


def _count_parameters(model: torch.nn.Module) -> tuple[int, int]:
    params = list(model.parameters())
    return sum(p.numel() for p in params), sum(p.numel() for p in params if p.requires_grad)


def _free_after_oom(device: torch.device) -> None:
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# --- the file edge ----------------------------------------------------------------------------


def load_training_data(request: TrainingRunRequest) -> TrainingData:
    """Both splits of `request.dataset`, prepared in `request.root`, with its statistics.

    An unknown model fails before the data is read."""
    from nnperf.workload import datasets as data_mod
    from nnperf.workload import models as models_mod

    spec = data_mod.get_spec(request.dataset)
    models_mod.get_spec(request.model)
    train_images, train_labels = data_mod.load_split(request.root, request.dataset, "train")
    test_images, test_labels = data_mod.load_split(request.root, request.dataset, "test")
    input_size = (
        request.input_size
        or request.convergence.input_size
        or models_mod.input_size(request.model, int(train_images.shape[1]))
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
    request: TrainingRunRequest, num_classes: int, resuming: bool
) -> tuple[Callable[[], torch.nn.Module], dict | None]:
    """A factory of the run's initial model and the record of its pretrained weights.

    With `convergence.pretrained`, the weights file is read now, so a missing or unreadable
    file fails before any training; a resumed run does not need it (the checkpoint holds the
    weights): its factory builds the same layers (torchvision's model with a `num_classes`
    head, backbone frozen as asked) with random weights that the checkpoint replaces.
    """
    from nnperf.workload import models as models_mod

    settings = request.convergence
    if settings.pretrained is None:
        return (lambda: models_mod.build_model(request.model, num_classes)), None
    if resuming:
        models_mod.pretrained_weights(request.model, settings.pretrained)

        def bare() -> torch.nn.Module:
            model = models_mod.build_model(request.model, num_classes)
            if settings.freeze_backbone:
                models_mod.freeze_backbone(model, models_mod.get_spec(request.model).head)
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
    """The newest checkpoint in `checkpoint_dir` when this very run wrote it; otherwise
    (other settings or code, or an unreadable file) the folder's checkpoints are another
    run's: they are removed, with a line saying why, and the run starts over."""
    try:
        newest = checkpoints.latest(checkpoint_dir)
        if newest is not None:
            checkpoints.check_identity(newest, checkpoints.load(newest), identity)
        return newest
    except NnperfError as exc:
        print(f"{name}: starting over: {exc}", flush=True)
        for which in checkpoints.NAMES:
            checkpoints.path_of(checkpoint_dir, which).unlink(missing_ok=True)
        return None


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
    factory, pretrained = model_factory(request, data.num_classes, resume_from is not None)
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
    from nnperf.core.wording import count_of

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
        return f"{name}: {summary['status']}: {summary['error'] or summary['stop_reason']}; {best_text}; {reached}"
    return f"{name}: {best_text}; {reached}"
