"""`nnperf compare-machines`: one table and one figure of throughput across machines.

Merges this machine's summary with the `results/` folders of other machines
(config `report.extra_results`), labels every row with its machine (device name and host
name from the environment record) and writes the merged summary
(`results/tables/machines_summary.csv`) and a seaborn bar chart of median throughput per
configuration with one colour per machine (`results/figures/machines/throughput.png`).
"""

from __future__ import annotations

import argparse

from nnperf import files, machines, results
from nnperf.commands.render_report import add_input_flags, extra_folders, local_folder
from nnperf.errors import NnperfError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compare-machines",
        help="Merge results of several machines into one summary table and figure.",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_input_flags(parser)
    parser.add_argument(
        "--out-csv",
        required=True,
        metavar="CSV",
        help="merged summary with a machine column " "(results/tables/machines_summary.csv)",
    )
    parser.add_argument(
        "--out-figure",
        required=True,
        metavar="PNG",
        help="throughput per machine (results/figures/machines/throughput.png)",
    )
    parser.add_argument(
        "--dpi", type=int, default=120, help="figure resolution (default %(default)s)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    folders = [local_folder(args), *extra_folders(args)]
    loaded = results.load(folders)
    if loaded.summary is None:
        raise NnperfError(
            "compare-machines: no summary.csv in any results folder; run the "
            "timed runs (aggregate_runs) first"
        )
    files.write_csv(args.out_csv, loaded.summary)
    grid = machines.plot_throughput_by_machine(loaded.summary, loaded.runs)
    with files.atomic_path(args.out_figure) as tmp:
        grid.figure.savefig(tmp, dpi=args.dpi, bbox_inches="tight", format="png")
    n_machines = loaded.summary["machine"].nunique()
    print(
        f"compare-machines: {len(loaded.summary)} configurations on {n_machines} machine(s) "
        f"-> {args.out_csv}, {args.out_figure}"
    )
    return 0
