"""The words every part of nnperf shares, defined once: devices, precisions and their order,
the phases of a step, the configuration keys and the reference a speedup is measured against.

Torch-free and import-free on purpose: the workflow reads it while Snakemake builds the DAG,
and every reader of results (tables, figures, the report) sorts and labels with it, so that a
figure and a table can never disagree on what comes first.

It holds names only. What a precision *does* is `nnperf.core.precision`; whether this machine
can run it is `nnperf.core.devices`; where files go is `nnperf.core.layout`; the settings are
`nnperf.core.contract`.
"""

from __future__ import annotations

from typing import Iterable

# Concrete devices a run can use. `auto` (config `devices`) resolves to one of them.
DEVICES = ("cpu", "cuda", "mps")

# The workflow's rules whose jobs run on their device and measure: they hold `bench_slot`
# (never two at once), and only they need the device's preflight; the other jobs that carry a
# device in their keys (copies, tables, figures) only read files.
MEASURING_RULES = frozenset(
    ("ceilings", "timed_group", "ncu_profile", "operator_profile", "train_to_accuracy")
)
AUTO_DEVICE = "auto"

# Numeric modes, in the order every table, figure and finding lists them: full precision
# first, then the reduced ones from widest mantissa to narrowest exponent.
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
# The precisions that switch TF32 math on: process-global flags (`nnperf.core.precision`).
TF32_PRECISIONS = ("tf32",)

# fp16 on CPU is left out: CPU autocast to fp16 has no fast kernels on common CPUs, so its
# timings would measure emulation, not a training mode anyone uses.
SUPPORTED_PRECISIONS = {
    "cpu": ("fp32", "bf16"),
    "cuda": PRECISIONS,
    "mps": ("fp32", "fp16", "bf16"),
}

# Phases of one training step, in order; per-step CSV columns are `<phase>_s`.
PHASES = ("data_wait", "h2d", "forward", "backward", "optimizer")
# A configuration is measured by worker processes, each running timed windows of steps;
# every per-step row says which process and window it belongs to.
STEP_CSV_COLUMNS = (
    "process",
    "window",
    "step",
    *(f"{phase}_s" for phase in PHASES),
    "step_time_s",
    "loss",
)
# One row per timed window (the unit the confidence interval is built from), with what was
# sampled around it to tell a clean window from a disturbed one (nnperf.engine.stability).
WINDOW_CSV_COLUMNS = (
    "process",
    "window",
    "steps",
    "images",
    "window_s",
    "throughput_img_s",
    "started_at_unix",
    "ended_at_unix",
    "loss_end",
    # The window's own peak device memory (reset at its start; null on the CPU).
    "peak_memory_device_bytes",
    "sm_clock_mhz",
    "memory_clock_mhz",
    "throttle_reasons",
    "power_capped",
    "load_1m",
    "other_cores",
    "steal_share",
    "runnable_threads",
    "own_threads",
    "cores",
    "flagged",
    "flag_reasons",
    # Left out of the estimate and the comparison's rounds when it arrived, and why
    # (`DISCARD_CAUSES`, "|"-joined): the engine measured another window in its place.
    "discarded",
    "discard_reasons",
)
# One row per loader window (nnperf.engine.loader: the feeder iterated with no training,
# after the timed windows), in the run document's `loader_windows`.
LOADER_WINDOW_COLUMNS = (
    "process",
    "window",
    "batches",
    "images",
    "window_s",
    "loader_rate_img_s",
    "drained_batches",
    "drain_s",
    "started_at_unix",
    "ended_at_unix",
)
# Whether the input pipeline limits a configuration (summary.csv `input_bound`; the rule is
# nnperf.report.input_verdict's).
# A window is flagged (`nnperf.engine.stability`) when other processes used more than this
# many cores beyond the ones the run leaves free (background daemons use a few hundredths of
# a core), or the hypervisor stole more than this share of the CPU time. Here, not in the
# engine, because the report's torch-free environment reads them too (`nnperf.report.noise`).
OVERLOAD_TOLERANCE_CORES = 0.25
STEAL_LIMIT = 0.05

INPUT_VERDICTS = ("input_bound", "not_input_bound", "undetermined")

# Relative 95% CI half-width a configuration is measured to when `timing.target_ci` is null:
# GPU step times are steady enough for 1%; CPU runs share the host with everything else.
DEFAULT_TARGET_CI = {"cpu": 0.03, "cuda": 0.01, "mps": 0.03}

# How a configuration's measurement ended (run JSON `status`): measured; out of memory; its
# minimal measurement could not fit in `timing.max_seconds`; so many of its windows were
# disturbed (`DISCARD_CAUSES`) that too few clean ones were left for an estimate within the
# budget (its numbers, from the clean windows there are, are kept but never plotted).
RUN_STATUSES = ("ok", "oom", "over_budget", "host_busy")
# What becomes of a disturbed window (config `timing.disturbed_windows`): measured again in
# its place and left out of the estimate, or flagged and averaged in.
DISTURBED_WINDOW_POLICIES = ("remeasure", "keep")
# The grain a group's comparisons are paired at (config `timing.pairing`): window by window
# inside processes the members share (`nnperf.engine.sharing`), or process by process.
PAIRING_GRAINS = ("window", "process")
# Why a measurement stopped (run JSON `stop_reason`): the first four end an `ok` one;
# `over_budget` is the status of the same name (a steady step or a one-time step,
# `over_budget_phase`, that the budget cannot hold).
STOP_REASONS = ("ci_target", "budget", "max_processes", "target_unreachable", "over_budget")
# The numbers a stop reason is stated with (run JSON `stop_numbers`, summary.csv
# `stop_<name>`; worded by `nnperf.core.wording.stop_sentence`): the CI reached and its
# target; the seconds spent of the budget; the process limit; for an unreachable target the
# process spread (point and 90% lower bound, relative), the processes the target needs at
# each and how many processes fit; for an over-budget one the step time (a lower bound when
# cut off), the steps still needed and their seconds, the seconds left, and a one-time
# step's seconds against its bound.
STOP_NUMBERS = (
    "ci_half_width_rel",
    "target_ci",
    "spent_s",
    "budget_s",
    "max_processes",
    "process_spread_rel",
    "spread_low_rel",
    "processes_needed",
    "processes_needed_low",
    "processes_fit",
    "step_s",
    "step_lower_bound",
    "steps_left",
    "min_windows",
    "timed_steps",
    "needed_s",
    "left_s",
    "one_time_s",
    "bound_s",
)

# Why a configuration's measurement is flagged unstable (run JSON `unstable_reasons`, "|"-joined
# in summary.csv; a window's `flag_reasons` holds the first four): windows whose host was
# overloaded, whose CPU time was stolen, whose GPU throttled or whose SM clock dropped; a
# further process stopped at the budget, the host loaded while an over-budget step was timed,
# a further process out of memory. Worded by `nnperf.core.wording.unstable_sentence`.
UNSTABLE_REASONS = (
    "host_overloaded",
    "cpu_steal",
    "gpu_throttled",
    "sm_clock_drop",
    "process_stopped_at_budget",
    "host_loaded_while_timed",
    "process_oom",
)
# Why a window is left out of the estimate and the comparison's rounds when it arrives (run
# JSON `discarded_causes`, summary.csv `discarded_<cause>`): the window flags of
# `nnperf.engine.stability`, at the thresholds above.
DISCARD_CAUSES = UNSTABLE_REASONS[:4]
# The numbers they are stated with (run JSON `unstable_numbers`, summary.csv
# `unstable_<name>`): the windows each window reason hit of all windows; the worst other
# processes' cores beside the run's threads of the host's cores; the worst steal share; the
# throttle reasons seen (NVML codes, "|"-joined); the lowest SM clock and the median; the
# processes stopped at the budget and the longest they waited; the other processes' cores
# while an over-budget step was timed; the processes out of memory.
UNSTABLE_NUMBERS = (
    "windows",
    "host_overloaded_windows",
    "cpu_steal_windows",
    "gpu_throttled_windows",
    "sm_clock_drop_windows",
    "other_cores",
    "own_threads",
    "cores",
    "steal_share",
    "throttle_reasons",
    "sm_clock_min_mhz",
    "sm_clock_median_mhz",
    "stopped_processes",
    "stopped_after_s",
    "host_load_other_cores",
    "oom_processes",
)

# A worker process lost without its result and replaced (run JSON `worker_losses`, one
# object per loss; nnperf.engine.losses): its process index, the signal that ended it
# ("SIGKILL": the kernel's OOM killer, most often) or null, its exit status in
# multiprocessing's convention (-9 for SIGKILL) or null when unknown, the phase it was in,
# its round in an interleaved group, and its PID.
WORKER_LOSS_FIELDS = ("process", "signal", "exit_code", "phase", "round", "pid")

# The keys of one configuration, in the order results paths and tables use them.
CONFIG_KEYS = ("device", "model", "precision", "batch_size", "variant")

# Speedups are measured against this variant at this precision (config `variants` must
# name it; the schema documents it).
REFERENCE_VARIANT = "baseline"
REFERENCE_PRECISION = "fp32"

# The built-in datasets: each name is also its key in results paths.
DATASETS = ("synthetic", "cifar10", "cifar100")
# The user's own folder of JPEGs and PNGs (torchvision's ImageFolder layout); its key in
# results paths is the folder's name or `dataset.label` (`DatasetSettings.key`).
IMAGEFOLDER = "imagefolder"
DATASET_NAMES = (*DATASETS, IMAGEFOLDER)
# What a dataset key in a results path may look like: a built-in name or a label.
DATASET_KEY_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_-]*"
OPTIMIZERS = ("sgd", "adam")
COMPILE_MODES = (False, "default", "reduce-overhead", "max-autotune")
OPTIMIZER_IMPLS = ("default", "foreach", "fused", "for-loop")
DATA_PATHS = ("dataloader", "device_resident")
CLOCK_CONTROLS = ("base", "none")
NCU_ENABLED = ("auto", True, False)

# The `kind` field of a timed run's JSON document.
RUN_KIND = "timed_run"

# Training to a target accuracy (nnperf.training.to_accuracy, config `convergence:`).
TRAINING_RUN_KIND = "training_run"
# The optimisers and learning-rate schedules a training run can use. AdamW rather than Adam:
# with weight_decay 0 the two are the same update, and with decay AdamW is the one
# fine-tuning recipes mean.
TRAINING_OPTIMIZERS = ("sgd", "adamw")
LR_SCHEDULES = ("cosine", "one_cycle", "constant")
# How a training run ended (its summary's `status`): trained as asked (to the target or for
# all epochs); stopped by `convergence.max_seconds`; out of memory; the loss became NaN/inf.
TRAINING_STATUSES = ("ok", "over_budget", "oom", "diverged")
# Why it stopped (`stop_reason`): the target was reached (with stop_at_target), every epoch
# ran, or one of the statuses above.
TRAINING_STOP_REASONS = ("target", "epochs", "budget", "oom", "diverged")
# A training run's keys: a configuration's, plus the recipe (the named convergence settings).
TRAINING_KEYS = ("dataset", "device", "model", "precision", "batch_size", "variant", "recipe")
# The recipe a study trains with when it names none (config `recipes`).
DEFAULT_RECIPE = "default"
# One row per epoch (epoch 0 is the model before training: its test accuracy is the start of
# the curve). Times are training only; evaluation is timed apart in eval_time_s. one_time_s
# is the part of epoch_time_s spent in a process's first steps (compilation, autotuning,
# CUDA-graph recording): 0 but in the first epoch a process trains.
EPOCH_CSV_COLUMNS = (
    *TRAINING_KEYS,
    "epoch",
    "train_loss",
    "test_loss",
    "test_top1",
    "lr",
    "epoch_time_s",
    "one_time_s",
    "eval_time_s",
    "train_time_s",
    "throughput_img_s",
    "images_seen",
)

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
