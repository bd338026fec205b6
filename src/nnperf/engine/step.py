"""One training setup built from a run's keys and variant, split into timeable phases.

`build_training()` turns (model, device, precision, batch size, variant, hyper-parameters,
data arrays) into a `Training` whose methods are the phases of one SGD step:
`next_batch` (data wait), `to_device` (host-to-device + input preparation), `forward`,
`backward`, `optimizer_step`. `nnperf.engine.timing` puts clocks between them and
`nnperf.ncu.profiled_step` puts NVTX ranges around them; neither knows how a step is made.

Training to accuracy (`nnperf.training.to_accuracy`) builds its run from the same pieces
(`place_model`, `compile_model`, `make_input_preparer`, `Training` with its own loss), so a
configuration trains to accuracy with exactly the step its timed runs measure.

It does not load data or build models by name (the caller passes arrays and a module, so the
engine runs on anything), and it does not time anything.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from nnperf.core.precision import apply_math_flags, autocast, make_grad_scaler
from nnperf.core.contract import ConvergenceSettings, TrainingSettings, VariantSettings
from nnperf.core.errors import NnperfError
from nnperf.core.vocab import OPTIMIZERS, TRAINING_OPTIMIZERS
from nnperf.engine import stopping
from nnperf.engine.feeders import InputPreparer, image_side, make_feeder

# Messages of allocation failures that PyTorch raises as a plain RuntimeError rather than
# torch.OutOfMemoryError: the CPU allocator (c10/core/impl/alloc_cpu.cpp), cuBLAS/cuDNN
# workspace allocation, and the MPS allocator.
OOM_MESSAGE_MARKERS = (
    "out of memory",
    "can't allocate memory",
    "not enough memory",
    "cublas_status_alloc_failed",
    "cudnn_status_alloc_failed",
    "cudnn_status_not_enough_workspace",
    "mps backend out of memory",
)


def is_out_of_memory(exc: BaseException) -> bool:
    """True when `exc` is an allocation failure (a result to record, not a bug)."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    if isinstance(exc, RuntimeError):
        message = str(exc).lower()
        return any(marker in message for marker in OOM_MESSAGE_MARKERS)
    return False


def optimizer_kwargs(impl: str) -> dict[str, Any]:
    """torch.optim.SGD/Adam keyword arguments that select an implementation."""
    return {
        "default": {},
        "foreach": {"foreach": True},
        "fused": {"fused": True},
        "for-loop": {"foreach": False},
    }[impl]


def resolved_optimizer_impl(impl: str, params: list[torch.Tensor]) -> str:
    """What `default` turns into on these parameters (torch picks by device).

    SGD and Adam share the rule: foreach when every parameter is on CUDA, else for-loop.
    """
    if impl != "default":
        return impl
    try:
        # Private helper, but it is exactly the rule SGD applies when foreach/fused are None.
        from torch.optim.optimizer import _default_to_fused_or_foreach

        fused, foreach = _default_to_fused_or_foreach(params, differentiable=False, use_fused=False)
    except Exception:  # pragma: no cover - the helper moved; say so instead of guessing
        return "default (unresolved)"
    return "fused" if fused else "foreach" if foreach else "for-loop"


def seed_everything(seed: int) -> None:
    """Seed torch (all devices) and numpy; Python's `random` is not used by the engine."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)


class Training:
    """A model, optimizer and data feeder; each method is one phase of a step."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scaler: torch.amp.GradScaler | None,
        feeder,
        prepare: InputPreparer,
        device: torch.device,
        precision: str,
        criterion: torch.nn.Module | None = None,
    ):
        self.model = model
        self.optimizer = optimizer
        self.scaler = scaler
        self.feeder = feeder
        self.prepare = prepare
        self.device = device
        self.precision = precision
        # Plain cross-entropy for the timed step; training to accuracy passes its own
        # (label smoothing).
        self.criterion = criterion if criterion is not None else torch.nn.CrossEntropyLoss()

    def next_batch(self):
        return self.feeder.next_batch()

    def to_device(self, batch):
        images, labels = self.feeder.to_device(batch)
        return self.prepare(images), labels

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        with autocast(self.device.type, self.precision):
            return self.criterion(self.model(inputs), labels)

    def backward(self, loss: torch.Tensor) -> None:
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()

    def optimizer_step(self) -> None:
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def step(self) -> torch.Tensor:
        """One untimed step, all phases; returns the detached loss (no host sync)."""
        inputs, labels = self.to_device(self.next_batch())
        loss = self.forward(inputs, labels)
        self.backward(loss)
        self.optimizer_step()
        return loss.detach()


# Every optimiser a step can take: the timed runs' (`vocab.OPTIMIZERS`, config `training:`)
# and training to accuracy's (`vocab.TRAINING_OPTIMIZERS`, a recipe's `optimizer`).
ALL_OPTIMIZERS = tuple(dict.fromkeys(OPTIMIZERS + TRAINING_OPTIMIZERS))


def make_optimizer(
    params: list[torch.Tensor],
    settings: TrainingSettings | ConvergenceSettings,
    impl: str = "default",
    key: str = "optimizer",
) -> torch.optim.Optimizer:
    """The optimiser `settings` name (config `training:` or a recipe), in the implementation
    the variant names (`impl`): SGD with momentum (Nesterov when a recipe asks), Adam or
    AdamW. An unknown name is one line naming the config `key` it came from."""
    if settings.optimizer == "sgd":
        return torch.optim.SGD(
            params,
            lr=settings.lr,
            momentum=settings.momentum,
            # Only a recipe has the setting; the timed runs' SGD is torch's default (off).
            nesterov=getattr(settings, "nesterov", False),
            weight_decay=settings.weight_decay,
            **optimizer_kwargs(impl),
        )
    if settings.optimizer in ("adam", "adamw"):
        # No momentum argument: betas and eps keep torch's defaults ((0.9, 0.999), 1e-8),
        # so AdamW with weight_decay 0 is Adam.
        adam = torch.optim.Adam if settings.optimizer == "adam" else torch.optim.AdamW
        return adam(
            params, lr=settings.lr, weight_decay=settings.weight_decay, **optimizer_kwargs(impl)
        )
    raise NnperfError(
        f"{key} {settings.optimizer!r} is unknown; allowed: {', '.join(ALL_OPTIMIZERS)}"
    )


def apply_process_settings(device: str, precision: str, settings: VariantSettings) -> None:
    """Process-global switches: threads, TF32 flags, cudnn.benchmark."""
    if settings.cpu_threads is not None:
        torch.set_num_threads(settings.cpu_threads)
    apply_math_flags(precision)
    torch.backends.cudnn.benchmark = bool(settings.cudnn_benchmark)


def build_training(
    model: torch.nn.Module,
    *,
    device: str,
    precision: str,
    batch_size: int,
    settings: VariantSettings,
    hyper: TrainingSettings,
    seed: int,
    images: np.ndarray,
    labels: np.ndarray,
    mean,
    std,
    input_size: int,
) -> Training:
    """Set the process up for one run and return its `Training`.

    `model` is freshly built (random init) on the CPU; build it after `seed_everything(seed)`
    so its initial weights are reproducible. `seed` seeds the data order and augmentation.
    """
    if batch_size < 1:
        raise NnperfError(f"batch_size {batch_size!r} is not allowed; allowed: an integer >= 1")
    if isinstance(images, np.ndarray) and (
        images.ndim != 4 or images.dtype != np.uint8 or images.shape[-1] != 3
    ):
        raise NnperfError(
            f"training images have shape {images.shape} and dtype {images.dtype}; "
            "allowed: uint8 [N, H, W, 3]"
        )
    torch_device = torch.device(device)
    apply_process_settings(device, precision, settings)
    model = place_model(model, torch_device, settings)
    params = trainable_parameters(model)
    optimizer = make_optimizer(params, hyper, settings.optimizer_impl)
    model = compile_model(model, settings)
    feeder = make_feeder(images, labels, batch_size, settings, hyper.augment, seed, torch_device)
    prepare = make_input_preparer(mean, std, image_side(images), input_size, settings, torch_device)
    scaler = make_grad_scaler(device, precision)
    return Training(model, optimizer, scaler, feeder, prepare, torch_device, precision)


def place_model(
    model: torch.nn.Module, device: torch.device, settings: VariantSettings
) -> torch.nn.Module:
    """`model` on `device` in the variant's memory format, in train mode."""
    memory_format = torch.channels_last if settings.channels_last else torch.contiguous_format
    model = model.to(device=device, memory_format=memory_format)
    model.train()
    return model


def trainable_parameters(model: torch.nn.Module) -> list[torch.Tensor]:
    """The parameters an optimizer updates: all but the frozen ones."""
    return [p for p in model.parameters() if p.requires_grad]


def compile_model(model: torch.nn.Module, settings: VariantSettings) -> torch.nn.Module:
    """`torch.compile(model)` in the variant's mode, or `model` when it does not compile."""
    if not settings.compile:
        return model
    mode = None if settings.compile == "default" else settings.compile
    return torch.compile(model, mode=mode)


def one_time_steps(settings: VariantSettings, device: str) -> int:
    """How many first steps of a process carry one-time costs that no later step repeats.

    The first always does (allocation, cuDNN autotuning with `cudnn_benchmark`, and
    compilation for a compiled variant; on an H100: autotuning 1.5-12 s and compilation
    17-21 s against steady steps of 10-32 ms). On CUDA a compile mode that captures CUDA
    graphs records them in the second step (0.51 s against 15 ms steady at batch 1024).
    Budgets and projections are planned from the steps after these, never from these.
    """
    return len(stopping.one_time_kinds(settings.compile, device))


def make_input_preparer(
    mean, std, image_size: int, input_size: int, settings: VariantSettings, device: torch.device
) -> InputPreparer:
    """The on-device uint8 -> normalised float step for the variant's memory format."""
    return InputPreparer(
        mean,
        std,
        image_size=image_size,
        input_size=input_size,
        channels_last=settings.channels_last,
        device=device,
    )
