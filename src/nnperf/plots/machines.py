"""The machine-comparison figure: median throughput per configuration, one colour per machine.

Takes the merged tables of several results folders (`nnperf.results.load`, every row with a
`machine` column) and returns a seaborn FacetGrid; saving it is the caller's job
(`nnperf.report.compare_machines`). Configurations are ordered as every table orders them:
precision in the shared order (`nnperf.vocab`), then batch size, then the reference variant
first.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from nnperf.errors import NnperfError  # noqa: E402
from nnperf.vocab import REFERENCE_VARIANT, precision_rank  # noqa: E402

# Machines further apart than this (a laptop CPU and a datacenter GPU) share a log axis.
LOG_AXIS_RATIO = 20


def configuration_order(data: pd.DataFrame) -> pd.DataFrame:
    """`data` with a `configuration` label column, sorted on the key columns themselves."""
    labelled = data.assign(
        batch_size=data["batch_size"].astype(int),
        _precision=data["precision"].astype(str).map(precision_rank),
        _variant=data["variant"].astype(str) != REFERENCE_VARIANT,
    )
    labelled["configuration"] = (
        labelled["precision"].astype(str)
        + " bs"
        + labelled["batch_size"].astype(str)
        + " "
        + labelled["variant"].astype(str)
    )
    ordered = labelled.sort_values(
        ["_precision", "precision", "batch_size", "_variant", "variant"], kind="stable"
    )
    return ordered.drop(columns=["_precision", "_variant"])


def throughput_by_machine(summary: pd.DataFrame, runs: pd.DataFrame | None = None):
    """Seaborn bars of median throughput per configuration, one colour per machine.

    From the per-rep runs when given (bars: median of the reps, whiskers: their
    interquartile range, the same statistics summary.csv holds); from summary.csv medians
    otherwise. One panel per model; a log axis when machines differ by more than
    LOG_AXIS_RATIO. Returns the seaborn FacetGrid.
    """
    if runs is not None and "throughput_img_s" in runs.columns:
        data = runs[runs["status"].astype(str) == "ok"] if "status" in runs else runs
        value, errorbar = "throughput_img_s", ("pi", 50)
    else:
        data = summary
        value, errorbar = "throughput_img_s_median", None
    data = data.dropna(subset=[value])
    if data.empty:
        raise NnperfError("no successful runs in any results folder: nothing to compare")
    data = configuration_order(data)
    grid = sns.catplot(
        data=data,
        kind="bar",
        x="configuration",
        y=value,
        hue="machine",
        col="model",
        col_wrap=min(2, data["model"].nunique()),
        order=list(dict.fromkeys(data["configuration"])),
        estimator="median",
        errorbar=errorbar,
        sharey=False,
        height=4,
        aspect=1.6,
        legend_out=False,
    )
    spread = data.groupby("machine")[value].median()
    if len(spread) > 1 and spread.max() > LOG_AXIS_RATIO * spread.min():
        grid.set(yscale="log")
    grid.set_axis_labels("precision, batch size, variant", "throughput (images/s)")
    grid.set_titles("{col_name}")
    for axis in grid.axes.flat:
        axis.tick_params(axis="x", rotation=45)
        for label in axis.get_xticklabels():
            label.set_horizontalalignment("right")
    grid.figure.suptitle(
        (
            "Training throughput per machine (median of reps; whiskers: IQR)"
            if errorbar
            else "Training throughput per machine (median of reps)"
        ),
        y=1.02,
    )
    grid.figure.tight_layout()
    # Machine names are long: the legend sits right of the panels, outside them (saving with
    # bbox_inches="tight" keeps it in the image).
    sns.move_legend(grid, "upper left", bbox_to_anchor=(1.0, 0.95), frameon=False)
    return grid
