"""`nnperf run`: one timed training run (one rep of one configuration) -> run JSON + step CSV.

With `--profile-one-step` it instead warms up and runs exactly one NVTX-marked step (the same
as `nnperf step`) and writes the profile sidecar JSON to `--out-json`.

Exit status: 0 when the run finished or ran out of memory (status "oom" in the JSON, a result);
2 for bad input; anything else keeps its traceback and a non-zero status.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from nnperf.devices import DEVICES, PRECISIONS, require_available, resolve_device
from nnperf.errors import NnperfError
from nnperf.files import write_csv, write_json
from nnperf.vocab import OPTIMIZERS
from nnperf.contract import TrainingSettings
from nnperf.variant import load_variant_settings

DEFAULTS = TrainingSettings()


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not allowed; allowed: an integer >= 1")
    return value


def add_run_arguments(parser: argparse.ArgumentParser, profile: bool) -> None:
    """Flags shared by `run` and `step`; names mirror the config keys."""
    keys = parser.add_argument_group("configuration keys")
    keys.add_argument("--model", required=True, help="model name (nnperf.models.MODEL_NAMES)")
    keys.add_argument(
        "--device",
        required=True,
        choices=(*DEVICES, "auto"),
        help="device to train on; auto picks cuda, then mps, then cpu",
    )
    keys.add_argument(
        "--precision",
        required=True,
        choices=PRECISIONS,
        help="fp32 (TF32 off), tf32, fp16 (autocast + GradScaler), bf16 (autocast)",
    )
    keys.add_argument(
        "--batch-size", required=True, type=_positive_int, help="images per training step"
    )
    keys.add_argument(
        "--variant",
        default="baseline",
        help="variant name recorded in the output (config `variants:` key)",
    )
    keys.add_argument(
        "--variant-settings",
        default=None,
        metavar="JSON_OR_FILE",
        help="the variant's toggles as a JSON object or a path to a JSON file: "
        "channels_last, cudnn_benchmark, compile, optimizer_impl, data_path, "
        "num_workers, pin_memory, prefetch_factor, cpu_threads (missing keys "
        "take the plain-PyTorch defaults)",
    )
    keys.add_argument("--rep", type=int, default=0, help="repeat index recorded in the output")
    data = parser.add_argument_group("data")
    data.add_argument(
        "--dataset",
        default="synthetic",
        help="dataset name (nnperf.data.DATASETS): synthetic, cifar10, cifar100",
    )
    data.add_argument(
        "--data-root",
        default=None,
        help="prepared dataset folder (default: resources/data/<dataset>)",
    )
    data.add_argument(
        "--input-size",
        type=_positive_int,
        default=None,
        help="model input side in pixels; images are resized on the device "
        "when it differs from theirs (default: nnperf.models.input_size)",
    )
    data.add_argument(
        "--augment",
        action=argparse.BooleanOptionalAction,
        default=DEFAULTS.augment,
        help="random crop (padding 4) and horizontal flip (config training.augment)",
    )
    train = parser.add_argument_group("training (config `training:`)")
    train.add_argument(
        "--warmup-steps",
        type=_positive_int,
        default=5,
        help="untimed steps before the timed window (autotune, allocator, compile)",
    )
    if not profile:
        train.add_argument(
            "--timed-steps", type=_positive_int, default=20, help="steps in the timed window"
        )
    train.add_argument(
        "--optimizer",
        choices=OPTIMIZERS,
        default=DEFAULTS.optimizer,
        help="sgd (with --momentum) or adam",
    )
    train.add_argument("--lr", type=float, default=DEFAULTS.lr, help="learning rate")
    train.add_argument("--momentum", type=float, default=DEFAULTS.momentum, help="SGD momentum")
    train.add_argument(
        "--weight-decay", type=float, default=DEFAULTS.weight_decay, help="weight decay"
    )
    train.add_argument(
        "--seed",
        type=int,
        default=DEFAULTS.seed,
        help="base seed; the run uses seed + rep for model init, data order and " "augmentation",
    )
    out = parser.add_argument_group("outputs")
    out.add_argument(
        "--out-json",
        default=None,
        help="run JSON (required for a timed run); with --profile-one-step / `step`: the "
        "profile sidecar JSON (optional: without it the sidecar is printed to stdout)",
    )
    if not profile:
        out.add_argument(
            "--out-steps-csv",
            default=None,
            help="per-step CSV (step, data_wait_s, h2d_s, forward_s, backward_s, "
            "optimizer_s, step_time_s, loss); required unless --profile-one-step",
        )
        out.add_argument(
            "--profile-one-step",
            action="store_true",
            help="run one NVTX-marked step for Nsight Compute instead of timing",
        )
    parser.add_argument(
        "--calibration-gemm-size",
        type=_positive_int,
        default=None,
        help="M=N=K of the calibration GEMM run before the profiled step (default: "
        "nnperf.ncu.CALIBRATION_GEMM_MNK, 4096^3, which the ncu parser checks against)",
    )
    parser.add_argument(
        "--workflow-dir",
        default=None,
        help="checkout whose git commit is recorded (default: current directory)",
    )


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "run",
        help="time one training run (one rep of one configuration)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_arguments(parser, profile=False)
    parser.set_defaults(func=run)


def build_request(args):
    """RunRequest + RunData + model factory from parsed flags (loads the dataset)."""
    from nnperf import data as data_mod
    from nnperf import models as models_mod
    from nnperf.runner import RunData
    from nnperf.contract import RunRequest

    device = resolve_device(args.device)
    require_available(device, args.precision)
    settings = load_variant_settings(args.variant_settings)
    spec = data_mod.get_spec(args.dataset)
    models_mod.get_spec(args.model)  # an unknown name fails here, before the data is read
    root = args.data_root or os.path.join("resources", "data", args.dataset)
    images, labels = data_mod.load_split(root, args.dataset, "train")
    num_classes = int(spec.num_classes)
    input_size = args.input_size or models_mod.input_size(args.model, int(images.shape[1]))

    def model_factory():
        return models_mod.build_model(args.model, num_classes)

    request = RunRequest(
        model=args.model,
        device=device,
        precision=args.precision,
        batch_size=args.batch_size,
        variant=args.variant,
        settings=settings,
        rep=args.rep,
        dataset=args.dataset,
        warmup_steps=args.warmup_steps,
        timed_steps=getattr(args, "timed_steps", 0),
        hyper=TrainingSettings(
            optimizer=args.optimizer,
            lr=args.lr,
            momentum=args.momentum,
            weight_decay=args.weight_decay,
            seed=args.seed,
            augment=args.augment,
        ),
    )
    run_data = RunData(
        images=images,
        labels=labels,
        mean=tuple(spec.mean),
        std=tuple(spec.std),
        num_classes=num_classes,
        input_size=input_size,
    )
    return request, run_data, model_factory


def profile(args) -> int:
    from nnperf.runner import perform_profile_step

    request, run_data, model_factory = build_request(args)
    document = perform_profile_step(
        request,
        model_factory,
        run_data,
        gemm_mnk=(args.calibration_gemm_size,) * 3 if args.calibration_gemm_size else None,
        workflow_dir=args.workflow_dir or os.getcwd(),
    )
    if args.out_json:
        write_json(args.out_json, document)
    else:
        # Under `ncu` the sidecar goes to the job log; its calibration FLOPs are the known answer.
        print(json.dumps({k: document[k] for k in ("status", "error", "nvtx", "calibration_gemm")}))
    if document["status"] == "oom":
        print(f"out of memory: {document['error']}", file=sys.stderr)
    else:
        print(
            f"profiled one step of {request.model} {request.device} {request.precision} "
            f"bs{request.batch_size} {request.variant}: loss {document['step']['loss']:.4f}"
        )
    return 0


def run(args) -> int:
    if getattr(args, "profile_one_step", False):
        return profile(args)
    if not args.out_json:
        raise NnperfError(
            "--out-json is missing; allowed: a path (required unless --profile-one-step)"
        )
    if not args.out_steps_csv:
        raise NnperfError(
            "--out-steps-csv is missing; allowed: a path (required unless " "--profile-one-step)"
        )
    from nnperf.runner import perform_run, steps_frame

    request, run_data, model_factory = build_request(args)
    document, steps = perform_run(
        request, model_factory, run_data, workflow_dir=args.workflow_dir or os.getcwd()
    )
    write_csv(args.out_steps_csv, steps_frame(steps))
    write_json(args.out_json, document)
    label = (
        f"{request.model} {request.device} {request.precision} bs{request.batch_size} "
        f"{request.variant} rep{request.rep}"
    )
    if document["status"] == "oom":
        print(f"{label}: out of memory: {document['error']}", file=sys.stderr)
    else:
        print(
            f"{label}: {document['throughput_img_s']:.1f} img/s, median step "
            f"{document['step_time_s']['median'] * 1e3:.2f} ms"
        )
    return 0
