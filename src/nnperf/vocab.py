"""The words every part of nnperf shares, defined once: devices, precisions and their order,
the phases of a step, the configuration keys and the reference a speedup is measured against.

Torch-free and import-free on purpose: the workflow reads it while Snakemake builds the DAG,
and every reader of results (tables, figures, the report) sorts and labels with it, so that a
figure and a table can never disagree on what comes first.

It holds names only. What a precision *does* is `nnperf.precision`; whether this machine can
run it is `nnperf.devices`; where files go is `nnperf.layout`; the settings are
`nnperf.requests`.
"""

from __future__ import annotations

from typing import Iterable

# Concrete devices a run can use. `auto` (config `devices`) resolves to one of them.
DEVICES = ("cpu", "cuda", "mps")
AUTO_DEVICE = "auto"

# Numeric modes, in the order every table, figure and finding lists them: full precision
# first, then the reduced ones from widest mantissa to narrowest exponent.
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")

# fp16 on CPU is left out: CPU autocast to fp16 has no fast kernels on common CPUs, so its
# timings would measure emulation, not a training mode anyone uses.
SUPPORTED_PRECISIONS = {
    "cpu": ("fp32", "bf16"),
    "cuda": PRECISIONS,
    "mps": ("fp32", "fp16", "bf16"),
}

# Phases of one training step, in order; per-step CSV columns are `<phase>_s`.
PHASES = ("data_wait", "h2d", "forward", "backward", "optimizer")
STEP_CSV_COLUMNS = ("step", *(f"{phase}_s" for phase in PHASES), "step_time_s", "loss")

# The keys of one configuration, in the order results paths and tables use them.
CONFIG_KEYS = ("device", "model", "precision", "batch_size", "variant")

# Speedups are measured against this variant at this precision (config `variants` must
# name it; the schema documents it).
REFERENCE_VARIANT = "baseline"
REFERENCE_PRECISION = "fp32"

DATASETS = ("synthetic", "cifar10", "cifar100")
OPTIMIZERS = ("sgd", "adam")
COMPILE_MODES = (False, "default", "reduce-overhead", "max-autotune")
OPTIMIZER_IMPLS = ("default", "foreach", "fused", "for-loop")
DATA_PATHS = ("dataloader", "device_resident")
CLOCK_CONTROLS = ("base", "none")
NCU_ENABLED = ("auto", True, False)

# The `kind` field of a timed run's JSON document.
RUN_KIND = "timed_run"

# Names outside a vocabulary sort after it, in their own order.
_UNKNOWN_RANK = 1_000


def precision_rank(precision: str) -> int:
    """Position of `precision` in PRECISIONS (unknown names after every known one)."""
    return PRECISIONS.index(precision) if precision in PRECISIONS else _UNKNOWN_RANK


def sort_precisions(precisions: Iterable[str]) -> list[str]:
    """Distinct precisions in the shared order; unknown ones last, alphabetically."""
    distinct = set(precisions)
    return sorted(distinct, key=lambda p: (precision_rank(p), p))


def supports(device: str, precision: str) -> bool:
    """True when `precision` is a meaningful training mode on `device`."""
    return precision in SUPPORTED_PRECISIONS.get(device, ())
