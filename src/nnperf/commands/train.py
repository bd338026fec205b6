"""`nnperf train`: train one configuration to accuracy -> summary JSON + per-epoch CSV, with
checkpoints to resume from.

Flags are the fields of `nnperf.core.contract.TrainingRunRequest` and `ConvergenceSettings` (one
recipe of config `recipes:`), named like the config keys and with their defaults; rule
`train_to_accuracy` builds the same request from the config. A run with `--checkpoints DIR`
resumes from the newest checkpoint there (a checkpoint of other settings is an error);
`--resume FILE` resumes from that checkpoint, `--restart` starts over. Exit status 0 also for
a run that ran out of memory, diverged or over its budget (its status says so: results).
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
from nnperf.core.contract import ConvergenceSettings, TrainingRunRequest, from_dict
from nnperf.core.devices import resolve_device
from nnperf.core.variant import load_variant_settings
from nnperf.core.vocab import (
    AUTO_DEVICE,
    DATASETS,
    DEVICES,
    LR_SCHEDULES,
    PRECISIONS,
    TRAINING_OPTIMIZERS,
)

HELP = {
    "model": MODEL_HELP,
    "device": f"device to train on; {AUTO_DEVICE} picks cuda, then mps, then cpu",
    "precision": "fp32 (TF32 off), tf32, fp16 (autocast + GradScaler), bf16 (autocast)",
    "batch_size": "images per training step",
    "variant": "variant name recorded in the output (config `variants:` key)",
    "recipe": "recipe name recorded in the output (config `recipes:` key)",
    "dataset": "dataset to train on, as rule prepare_dataset prepares it",
    "data_root": "prepared dataset folder (default: resources/data/<dataset>)",
    "input_size": "model input side in pixels (default: the model's own); images are resized",
    "epochs": "epochs to train at most",
    "target_accuracy": "test top-1 to reach, a fraction (0.9 = 90%%)",
    "stop_at_target": "end the run at the first epoch at the target",
    "max_seconds": "training seconds the run may spend (an epoch past them is not started)",
    "checkpoint_every": "write last.pt every this many epochs (0: best and final only)",
    "optimizer": "sgd (momentum, optionally Nesterov) or adamw",
    "lr": "peak learning rate",
    "momentum": "SGD momentum",
    "nesterov": "Nesterov momentum (SGD)",
    "weight_decay": "weight decay (decoupled for AdamW)",
    "schedule": "learning rate after the linear warm-up, stepped every iteration",
    "warmup_epochs": "linear warm-up in epochs (fractions allowed)",
    "label_smoothing": "label smoothing of the cross-entropy loss",
    "seed": "seed of the initial weights, the data order and augmentation",
    "augment": "random crop (padding 4) and horizontal flip",
    "pretrained": "torchvision weights name to start from (e.g. IMAGENET1K_V1); downloaded into torch hub's cache when absent",
    "pretrained_path": "the weights file (default: torch hub's cache)",
    "freeze_backbone": "train only the new classifier head (needs --pretrained)",
}
CHOICES = {
    "device": (*DEVICES, AUTO_DEVICE),
    "precision": PRECISIONS,
    "dataset": DATASETS,
    "optimizer": TRAINING_OPTIMIZERS,
    "schedule": LR_SCHEDULES,
}
# A recipe's own input_size is the request's --input-size here (one flag, one meaning).
RECIPE_HELP = {key: text for key, text in HELP.items() if key != "input_size"}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train one configuration to accuracy (epochs, checkpoints)",
        description=__doc__,
    )
    configuration = parser.add_argument_group("configuration")
    add_fields(configuration, TrainingRunRequest, HELP, CHOICES)
    add_model_factory_flag(configuration)
    parser.add_argument(
        "--variant-settings",
        metavar="JSON_OR_FILE",
        help="the variant's toggles (config `variants: {name: ...}`) as a JSON object or file; "
        "missing keys take the plain-PyTorch defaults",
    )
    recipe = parser.add_argument_group("recipe (one entry of config `recipes:`)")
    add_fields(recipe, ConvergenceSettings, RECIPE_HELP, CHOICES)
    parser.add_argument("--out-json", required=True, help="summary JSON to write")
    parser.add_argument("--out-epochs-csv", required=True, help="per-epoch CSV to write")
    parser.add_argument("--checkpoints", help="checkpoint folder (default: none are written)")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--resume", metavar="FILE", help="resume from this checkpoint")
    start.add_argument(
        "--restart", action="store_true", help="start over even if --checkpoints has some"
    )
    parser.add_argument(
        "--workflow-dir", default=os.curdir, help="checkout whose git commit is recorded"
    )
    parser.set_defaults(func=run)


def request_from(args: argparse.Namespace) -> TrainingRunRequest:
    """The TrainingRunRequest the flags describe, with `auto` resolved to this machine's."""
    values = field_values(args, TrainingRunRequest)
    values["model_source"] = model_source_of(args)
    values["device"] = resolve_device(values["device"])
    values["settings"] = load_variant_settings(args.variant_settings)
    recipe = field_values(args, ConvergenceSettings)
    recipe["input_size"] = values.get("input_size")
    values["convergence"] = from_dict(ConvergenceSettings, recipe)
    return from_dict(TrainingRunRequest, values)


def run(args: argparse.Namespace) -> int:
    from nnperf.training.to_accuracy import train_to_files

    train_to_files(
        request_from(args),
        args.out_json,
        args.out_epochs_csv,
        args.checkpoints,
        resume=args.resume or not args.restart,
        workflow_dir=args.workflow_dir,
    )
    return 0
