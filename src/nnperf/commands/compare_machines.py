"""`nnperf compare-machines`: one table and one figure of throughput across machines.

Merges this machine's summary with the results folders of other machines
(`--extra-results`, config `report.extra_results`), labels every row with its machine (device
name and host name from the environment record) and writes the merged summary and a bar chart
of mean throughput per configuration, one colour per machine
(`nnperf.report.plots.machines.compare_machines`, the same as rule `compare_machines`).
"""

from __future__ import annotations

import argparse

from nnperf.commands.render_report import add_input_flags, local_files, request


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compare-machines",
        help="Merge results of several machines into one summary table and figure.",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_input_flags(parser)
    parser.add_argument("--out-csv", required=True, help="merged summary with a machine column")
    parser.add_argument("--out-figure", required=True, help="PNG of throughput per machine")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported here: seaborn costs a second, and `nnperf --help` registers every verb.
    from nnperf.report.plots.machines import compare_machines

    compare_machines(request(args), local_files(args), args.out_csv, args.out_figure)
    return 0
