"""`nnperf complexity`: count one model's FLOPs, saved activations and memory traffic.

Builds the model on the `meta` device (shapes only: no weights are allocated and no
arithmetic runs, so even VGG-16 at 224x224 takes well under a second), calls
`nnperf.complexity.estimate` and writes the JSON document and the per-layer CSV.
"""

from __future__ import annotations

import argparse
import time

import torch

from nnperf import complexity, data, files, models
from nnperf.errors import NnperfError



def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "complexity",
        help="count parameters, FLOPs, saved activations and memory traffic of a model",
        description=(
            "Count one training step of MODEL on the meta device (no weights, no arithmetic): "
            "parameters, forward and training-step FLOPs per image, bytes saved for backward, "
            "weight/gradient/optimizer-state bytes and the algorithmic memory traffic per "
            "precision. Writes a JSON document and a per-layer CSV."
        ),
    )
    parser.add_argument(
        "--model", required=True, help=f"model name; one of: {', '.join(models.MODEL_NAMES)}"
    )
    parser.add_argument(
        "--dataset",
        required=True,
        help="dataset the model is trained on (sets num_classes); "
        f"one of: {', '.join(data.DATASET_NAMES)}",
    )
    parser.add_argument(
        "--out-json",
        required=True,
        help="where to write the JSON document (results/complexity/{model}.json)",
    )
    parser.add_argument(
        "--out-csv",
        required=True,
        help="where to write the per-layer table (results/complexity/{model}_layers.csv)",
    )
    parser.add_argument(
        "--optimizer",
        default="sgd",
        choices=sorted(complexity.OPTIMIZER_STATE_BUFFERS),
        help="optimizer whose state is counted (config training.optimizer; default: sgd)",
    )
    parser.add_argument(
        "--momentum",
        type=float,
        default=0.9,
        help="SGD momentum (config training.momentum); 0 means SGD keeps no state buffer "
        "(default: 0.9)",
    )
    parser.add_argument(
        "--input-size",
        type=int,
        default=None,
        help="side of the square input image in pixels (default: the model's own size, "
        "32 for *_cifar models and 224 for ImageNet-style ones)",
    )
    parser.set_defaults(func=run)


def complexity_document(
    model_name: str,
    dataset: str,
    optimizer: str = "sgd",
    momentum: float = 0.9,
    input_size: int | None = None,
):
    """(JSON document, per-layer DataFrame) for one model, counted on the meta device."""
    models.get_spec(model_name)  # an unknown model is reported before anything else
    spec = data.get_spec(dataset)
    num_classes = spec.num_classes
    size = models.input_size(model_name, spec.image_shape[-1]) if input_size is None else input_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise NnperfError(f"--input-size {size!r} is invalid; allowed: an integer >= 1")
    with torch.device("meta"):
        model = models.build_model(model_name, num_classes)
    try:
        result = complexity.estimate(model, (3, size, size), optimizer=optimizer, momentum=momentum)
    except RuntimeError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise NnperfError(
            f"--input-size {size} does not fit model {model_name!r} ({first_line})"
        ) from None
    document = {"model": model_name, "dataset": dataset, **result.to_dict()}
    return document, result.layers


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    document, layers = complexity_document(
        args.model, args.dataset, args.optimizer, args.momentum, args.input_size
    )
    files.write_json(args.out_json, document)
    files.write_csv(args.out_csv, layers)
    elapsed_s = time.perf_counter() - started
    print(
        f"{args.model}: {document['forward_flops_per_image'] / 1e9:.3f} GFLOP forward, "
        f"{document['train_step_flops_per_image'] / 1e9:.3f} GFLOP per training step, "
        f"{document['saved_activation_bytes_per_image'] / 2**20:.1f} MiB saved per image "
        f"(counted in {elapsed_s:.2f} s)"
    )
    return 0
