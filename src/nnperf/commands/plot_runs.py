"""`nnperf plot-runs`: one figure of the timed runs for one device and model.

Kinds: `throughput` (median img/s vs batch size, hue precision, style variant, 95% CI; reads
--runs), `breakdown` (stacked per-phase step time; reads --summary), `speedup` (precisions vs
fp32 and variants vs baseline; reads --summary). One call writes one file, so each figure is
a target of its own.
"""

from __future__ import annotations

import argparse

from nnperf.errors import NnperfError
from nnperf.files import atomic_path

FIGURE_DPI = 150


# The kinds nnperf.plots.runs.figure_for draws (not imported: seaborn is slow to import).
FIGURE_KINDS = ("throughput", "breakdown", "speedup")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "plot-runs",
        help="draw one figure of the timed runs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--kind", required=True, choices=FIGURE_KINDS, help="which figure")
    parser.add_argument("--device", required=True, help="device whose runs are drawn")
    parser.add_argument("--model", required=True, help="model whose runs are drawn")
    parser.add_argument("--runs", default=None, help="runs.csv (needed by --kind throughput)")
    parser.add_argument(
        "--summary", default=None, help="summary.csv (needed by --kind breakdown and speedup)"
    )
    parser.add_argument("--out", required=True, help="image file to write (.png, .svg, .pdf)")
    parser.set_defaults(func=run)


def _read_table(path: str | None, flag: str, kind: str):
    import pandas as pd

    if path is None:
        raise NnperfError(f"{flag} is missing; allowed: a CSV path (needed by --kind {kind})")
    try:
        return pd.read_csv(path)
    except FileNotFoundError:
        raise NnperfError(f"{path}: file not found") from None


def run(args) -> int:
    from nnperf.plots.runs import figure_for

    runs = _read_table(args.runs, "--runs", args.kind) if args.kind == "throughput" else None
    summary = (
        _read_table(args.summary, "--summary", args.kind) if args.kind != "throughput" else None
    )
    figure = figure_for(args.kind, runs, summary, args.device, args.model)
    suffix = args.out.rsplit(".", 1)[-1] if "." in args.out else "png"
    with atomic_path(args.out) as tmp:
        figure.savefig(tmp, dpi=FIGURE_DPI, format=suffix)
    print(f"{args.kind} figure of {args.device}/{args.model} -> {args.out}")
    return 0
