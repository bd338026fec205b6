"""`nnperf run`: measure one configuration -> run JSON + per-window CSV + per-step CSV.

Flags are the fields of `nnperf.core.contract.RunRequest`, `TrainingSettings` and
`TimingSettings`, named like the config keys and with their defaults; rule `timed_run` builds
the same request from the config. Exit status 0 also for a configuration that ran out of
memory or over its budget (status "oom" / "over_budget" in the JSON: results).
"""

from __future__ import annotations

import argparse
import os

from nnperf.commands import (
    MODEL_HELP,
    add_fields,
    add_model_factory_flag,
    field_values,
    model_source_of,
)
from nnperf.core.contract import RunRequest, TimingSettings, TrainingSettings, from_dict
from nnperf.core.devices import resolve_device
from nnperf.core.variant import load_variant_settings
from nnperf.core.vocab import AUTO_DEVICE, DATASETS, DEVICES, OPTIMIZERS, PRECISIONS

HELP = {
    "model": MODEL_HELP,
    "device": f"device to train on; {AUTO_DEVICE} picks cuda, then mps, then cpu",
    "precision": "fp32 (TF32 off), tf32, fp16 (autocast + GradScaler), bf16 (autocast)",
    "batch_size": "images per training step",
    "variant": "variant name recorded in the output (config `variants:` key)",
    "dataset": "dataset to train on, as rule prepare_dataset prepares it",
    "data_root": "prepared dataset folder (default: resources/data/<dataset>)",
    "input_size": "model input side in pixels (default: the model's own); images are resized",
    "warmup_steps": "untimed steps per worker process (autotune, allocator, compile)",
    "timed_steps": "steps in one timed window",
    "optimizer": "optimizer of the training step",
    "lr": "learning rate",
    "momentum": "SGD momentum",
    "weight_decay": "weight decay",
    "seed": "base seed of model init, data order and augmentation; each process adds its index",
    "target_ci": "relative 95%% CI half-width to stop at (default: 0.01 on GPUs, 0.03 on CPUs)",
    "min_seconds": "timed-window seconds before the CI may stop the measurement (default: a "
    "third of max-seconds)",
    "max_seconds": "wall-time budget of the configuration's steady steps (all processes; the "
    "first process's one-time steps have bounds of their own)",
    "min_processes": "worker processes at least",
    "max_processes": "worker processes at most",
    "min_windows": "timed windows per process at least",
    "max_windows": "timed windows per process at most",
    "max_first_step_seconds": "bound of a process's first step (allocation, cuDNN autotuning; "
    "default: max-seconds)",
    "max_compile_seconds": "bound of torch.compile's compilation",
    "max_recording_seconds": "bound of the CUDA-graph recording step (default: max-seconds)",
    "disturbed_windows": "a window other load disturbed: measured again in its place "
    "(remeasure) or flagged and averaged in (keep)",
    "pairing": "the grain a group's comparisons are paired at: window (windows take turns in "
    "shared processes) or process",
    "augment": "random crop (padding 4) and horizontal flip, as in CIFAR training",
}
CHOICES = {"device": (*DEVICES, AUTO_DEVICE), "precision": PRECISIONS, "dataset": DATASETS}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "run",
        help="measure one configuration (worker processes x timed windows)",
        description=__doc__,
    )
    configuration = parser.add_argument_group("configuration")
    add_fields(configuration, RunRequest, HELP, CHOICES)
    add_model_factory_flag(configuration)
    parser.add_argument(
        "--variant-settings",
        metavar="JSON_OR_FILE",
        help="the variant's toggles (config `variants: {name: ...}`) as a JSON object or file; "
        "missing keys take the plain-PyTorch defaults",
    )
    training = parser.add_argument_group("training (config `training:`)")
    add_fields(training, TrainingSettings, HELP, {"optimizer": OPTIMIZERS})
    add_fields(parser.add_argument_group("timing (config `timing:`)"), TimingSettings, HELP)
    parser.add_argument("--out-json", required=True, help="run JSON to write")
    parser.add_argument("--out-windows-csv", required=True, help="per-window CSV to write")
    parser.add_argument("--out-steps-csv", required=True, help="per-step CSV to write")
    parser.add_argument(
        "--workflow-dir", default=os.curdir, help="checkout whose git commit is recorded"
    )
    parser.set_defaults(func=run)


def request_from(args: argparse.Namespace) -> RunRequest:
    """The RunRequest the flags describe, with `auto` resolved to this machine's device."""
    values = field_values(args, RunRequest)
    values["model_source"] = model_source_of(args)
    values["device"] = resolve_device(values["device"])
    values["settings"] = load_variant_settings(args.variant_settings)
    values["training"] = from_dict(TrainingSettings, field_values(args, TrainingSettings))
    values["timing"] = from_dict(TimingSettings, field_values(args, TimingSettings))
    return from_dict(RunRequest, values)


def run(args: argparse.Namespace) -> int:
    from nnperf.engine.runner import run_to_files

    run_to_files(
        request_from(args),
        args.out_json,
        args.out_windows_csv,
        args.out_steps_csv,
        args.workflow_dir,
    )
    return 0
