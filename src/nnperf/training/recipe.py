"""The recipe of a training run to accuracy: its loss, learning-rate schedule and test
evaluation.

`nnperf.training.loop` trains with these; they are apart because they are the recipe's
meaning (what `ConvergenceSettings` asks for, checked against seed 000's numbers in
`tests/training/test_to_accuracy.py`) rather than the loop's bookkeeping. The optimiser is the one
factory the timed runs use too (`nnperf.engine.step.make_optimizer`).
"""

from __future__ import annotations

import torch

from nnperf.core import precision as precision_mod
from nnperf.core import vocab
from nnperf.core.contract import ConvergenceSettings
from nnperf.core.errors import NnperfError
from nnperf.engine.step import make_optimizer

__all__ = [
    "current_lr",
    "evaluate",
    "make_criterion",
    "make_lr_scheduler",
    "make_optimizer",
    "warmup_iterations",
]


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
