"""`nnperf models`: the model names a study can give here, with their input size.

Lists nnperf's registry, torchvision's classification models and, where timm is installed,
timm's (as `timm_<name>`, about 1,400 of them), one row each: the name to write in config
`models:`, its source and the image side it runs at by default. `FILTER` keeps the names that
contain it (`nnperf models vit`). `--params` adds each listed model's parameter count (at
1,000 classes), which builds it on the `meta` device (no weights allocated, a fraction of a
second each, minutes for all of timm): filter first. A user's own model is a `models:`
mapping with `factory:` (docs/own-model.md) and is not listed.
"""

from __future__ import annotations

import argparse

SOURCES = ("registry", "torchvision", "timm")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "models", help="list the model names available here", description=__doc__
    )
    parser.add_argument(
        "filter", nargs="?", default="", help="keep the names containing this text (e.g. vit)"
    )
    parser.add_argument(
        "--source", choices=SOURCES, action="append", help="only this source (repeatable)"
    )
    parser.add_argument(
        "--params",
        action="store_true",
        help="add each listed model's parameter count (builds it on the meta device)",
    )
    parser.add_argument(
        "--num-classes", type=int, default=1000, help="classes the parameters are counted at"
    )
    parser.set_defaults(func=run)


def rows(text: str = "", sources=SOURCES, params: bool = False, num_classes: int = 1000):
    """(name, source, input size, parameters or None) of every model matching `text`."""
    import torch

    from nnperf.core import model_names
    from nnperf.workload import models

    names = {
        "registry": models.MODEL_NAMES,
        "torchvision": [n for n in model_names.torchvision_names() if n not in models.MODELS],
        "timm": [model_names.TIMM_PREFIX + n for n in model_names.timm_names()],
    }
    result = []
    for source in sources:
        for name in names[source]:
            if text.lower() not in name:
                continue
            count = None
            if params:
                with torch.device("meta"):
                    count = models.count_parameters(models.build_model(name, num_classes))[0]
            result.append((name, source, models.input_size(name), count))
    return result


def run(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    from nnperf.core import model_names

    found = rows(args.filter, args.source or SOURCES, args.params, args.num_classes)
    headers = ["model", "source", "input_size"] + (["params"] if args.params else [])
    table = [
        [name, source, size] + ([f"{count:,}"] if args.params else [])
        for name, source, size, count in found
    ]
    print(tabulate(table, headers=headers, tablefmt="plain") if table else "no model matches")
    if not model_names.timm_installed():
        print(f"(timm is not installed: {model_names.TIMM_INSTALL} lists ~1,400 more)")
    return 0
