"""Rule compare_machines' edge (`nnperf compare-machines`): this machine's summary merged
with other machines' (`report.extra_results`) and the figure of throughput per machine."""

from __future__ import annotations

import os

import pandas as pd

from nnperf.core import files
from nnperf.core.contract import ReportRequest
from nnperf.core.errors import NnperfError
from nnperf.report import results

# Resolution of the machine-comparison figure (the run figures use their own).
MACHINES_FIGURE_DPI = 120


def compare_machines(
    request: ReportRequest,
    local: results.FolderFiles,
    out_csv: str | os.PathLike,
    out_figure: str | os.PathLike,
) -> pd.DataFrame:
    """This machine's summary merged with `request.extra_results`' (a `machine` column on
    every row) and the figure of throughput per machine. Returns the merged summary."""
    # Imported here: seaborn costs a second and rendering the summary does not draw.
    import matplotlib.pyplot as plt

    from nnperf.report.plots.machines import throughput_by_machine

    loaded = results.load(results.with_extra_results(local, request.extra_results))
    if loaded.summary is None:
        raise NnperfError(
            "compare-machines: no summary.csv in any results folder; run the timed runs "
            "(rule aggregate_runs) first"
        )
    files.write_csv(out_csv, loaded.summary)
    grid = throughput_by_machine(loaded.summary, loaded.runs)
    try:
        with files.atomic_path(out_figure) as tmp:
            grid.figure.savefig(tmp, dpi=MACHINES_FIGURE_DPI, bbox_inches="tight", format="png")
    finally:
        plt.close(grid.figure)
    print(
        f"compare-machines: {len(loaded.summary)} configurations on "
        f"{loaded.summary['machine'].nunique()} machine(s) -> {os.fspath(out_csv)}, "
        f"{os.fspath(out_figure)}"
    )
    return loaded.summary
