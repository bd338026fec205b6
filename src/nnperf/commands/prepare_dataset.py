"""`nnperf prepare-dataset`: make resources/data/{dataset}/ (see nnperf.data.prepare)."""

from __future__ import annotations

import argparse

from nnperf import data


def register(subparsers: argparse._SubParsersAction) -> None:
    defaults = data.SyntheticSettings()
    parser = subparsers.add_parser(
        "prepare-dataset",
        help="download and verify CIFAR-10/100, or generate the synthetic set",
        description=(
            "Create a dataset directory in the CIFAR python-pickle layout, with a "
            "manifest.json. CIFAR archives are MD5-verified; the directory appears only "
            "when complete, and a failed attempt leaves an existing one untouched."
        ),
    )
    parser.add_argument(
        "--dataset",
        required=True,
        metavar="NAME",
        help=f"dataset.name: one of {', '.join(data.DATASET_NAMES)}",
    )
    parser.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="dataset directory to create or replace (the workflow uses resources/data/NAME)",
    )
    parser.add_argument(
        "--source",
        default=None,
        metavar="URL_OR_PATH",
        help=(
            "dataset.source: where the CIFAR archive comes from: an http(s)/ftp/file:// URL "
            "or a local path (default: the official URL); not allowed for synthetic"
        ),
    )
    parser.add_argument(
        "--md5",
        default=None,
        metavar="HEX",
        help=(
            "dataset.md5: expected MD5 of the archive (default: the official archive's, "
            "whatever the source, so mirrors and local copies are verified too; give it "
            "for any other archive); not allowed for synthetic"
        ),
    )
    parser.add_argument(
        "--synthetic-train-images",
        type=int,
        default=defaults.train_images,
        metavar="N",
        help=f"dataset.synthetic.train_images (synthetic only; default {defaults.train_images})",
    )
    parser.add_argument(
        "--synthetic-test-images",
        type=int,
        default=defaults.test_images,
        metavar="N",
        help=f"dataset.synthetic.test_images (synthetic only; default {defaults.test_images})",
    )
    parser.add_argument(
        "--synthetic-seed",
        "--seed",
        dest="synthetic_seed",
        type=int,
        default=defaults.seed,
        metavar="N",
        help=f"dataset.synthetic.seed (synthetic only; default {defaults.seed})",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    synthetic = data.SyntheticSettings(
        train_images=args.synthetic_train_images,
        test_images=args.synthetic_test_images,
        seed=args.synthetic_seed,
    )
    manifest = data.prepare(
        args.dataset, args.out, source=args.source, md5=args.md5, synthetic=synthetic
    )
    images = manifest["images"]
    if manifest["md5"] is None:
        how = f"generated with seed {manifest['synthetic']['seed']}"
    else:
        how = f"md5 {manifest['md5']['actual']} verified"
    print(
        f"{manifest['dataset']}: {images['train']} train and {images['test']} test images "
        f"in {args.out} ({how})"
    )
    return 0
