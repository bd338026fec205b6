"""The loop of a training run to accuracy: epochs, evaluation after each, checkpoints, and
the run's summary numbers.

`train_to_accuracy()` takes a model factory and arrays, so tests run it on toy models; the
file edge that loads a dataset and a model by name and writes the run's files is
`nnperf.training.to_accuracy`, and the recipe it follows (loss, schedule, evaluation)
`nnperf.training.recipe`. The module docstring of `nnperf.training.to_accuracy` says what is
timed and how a run resumes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
from typing import Any, Callable, Mapping

import numpy as np
import torch

from nnperf.core import precision as precision_mod
from nnperf.core import vocab
from nnperf.core.contract import ConvergenceSettings, TrainingRunRequest
from nnperf.engine.build import free_after_oom
from nnperf.engine.feeders import image_side, make_epoch_feeder
from nnperf.engine.step import (
    Training,
    apply_process_settings,
    compile_model,
    is_out_of_memory,
    make_input_preparer,
    make_optimizer,
    one_time_steps,
    place_model,
    resolved_optimizer_impl,
    seed_everything,
    trainable_parameters,
)
from nnperf.engine.timing import synchronize
from nnperf.training import checkpoints
from nnperf.training.recipe import (
    current_lr,
    evaluate,
    make_criterion,
    make_lr_scheduler,
    warmup_iterations,
)
from nnperf.workload.imagefolder import Split


@dataclasses.dataclass(frozen=True)
class TrainingData:
    """Both splits of a dataset and what the model needs to know about them."""

    train_images: Any  # uint8 [N, H, W, 3], or an ImageFolder's split decoded per step
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
            if isinstance(array, Split):
                # Its files' bytes are hashed by the data stage (the manifest's sha256).
                digest.update(f"{array.sha256}:{array.image_size}:{len(array)}".encode())
                continue
            digest.update(np.ascontiguousarray(array).tobytes())
        return digest.hexdigest()


@dataclasses.dataclass
class TrainingResult:
    """What a training run returns: its summary document and its per-epoch rows."""

    summary: dict[str, Any]
    epochs: list[dict[str, Any]]


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
    verdicts are made on steady steps (`nnperf.engine.stopping.one_time_kinds`)."""
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
    optimizer = make_optimizer(params, settings, variant.optimizer_impl, "convergence.optimizer")
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
        data.mean, data.std, image_side(data.train_images), data.input_size, variant, device
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
        synchronize(device)
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

    status, stop_reason, error, stop_numbers = "ok", "epochs", None, {}
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
                # Worded by nnperf.core.wording.training_budget_sentence.
                stop_numbers = {
                    "train_time_s": previous["train_time_s"],
                    "next_epoch": previous["epoch"] + 1,
                    "projected_epoch_s": projected or 0.0,
                    "budget_s": settings.max_seconds,
                }
                break
            epoch = previous["epoch"] + 1
            synchronize(device)
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
                        synchronize(device)
                        one_time_s = time.perf_counter() - began
            synchronize(device)
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
        free_after_oom(device.type)

    total, trainable = _count_parameters(base_model)
    summary = {
        "kind": vocab.TRAINING_RUN_KIND,
        "status": status,
        "stop_reason": stop_reason,
        "error": error,
        "stop_numbers": stop_numbers,
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
