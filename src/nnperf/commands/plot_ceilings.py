"""`nnperf plot-ceilings`: draw the working-set sweep of a ceilings JSON as a PNG."""

from __future__ import annotations

from nnperf.files import read_json
from nnperf.plots.ceilings import save_figure, sweep_figure


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "plot-ceilings",
        help="draw the working-set bandwidth sweep of a ceilings JSON",
        description="Draw bandwidth vs working-set size (log x) from `nnperf ceilings` output, "
        "with the cache sizes and the main-memory roof marked.",
    )
    parser.add_argument(
        "--ceilings", required=True, help="ceilings JSON, e.g. results/ceilings/cpu.json"
    )
    parser.add_argument(
        "--out", required=True, help="output PNG, e.g. results/figures/ceilings/cpu_sweep.png"
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    document = read_json(args.ceilings)
    save_figure(sweep_figure(document), args.out)
    print(f"working-set sweep -> {args.out}")
    return 0
